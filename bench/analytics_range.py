"""The Analytics page's range query over 1 million stored events (target: under 300 ms).

Seeds a real store file: the router's own migrations, then 1,000,000 events spread over the
last 30 days (8 models over 4 lanes, 2 % errors, 1 % aborted, log-normal latencies) inserted in
time order through the writer's statement, so the rollup trigger does exactly what it does in
production. Then a real `Store` answers `range_summary` for 1h, 24h, 7d and 30d: one warm-up,
then `--reps` timed calls each (median and max reported). For contrast, the exact raw-event
summary (`?from=&to=&bucket_seconds=`) over the same windows is timed once.

`python -m bench.analytics_range [--quick] [--events N]`; JSON to bench/out/analytics_range.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common as c
from router.config.schema import AnalyticsSection
from router.store import Store
from router.store.db import connect, migrate
from router.store.ranges import RANGES, plan
from router.store.rows import INSERT_EVENTS_JSON

DAYS = 30
# (model, its lane, share of the traffic): a model serves one lane, as configurations do.
MODELS = [
    *((f"text-{i}", "text", 0.14) for i in range(5)),
    ("embed-0", "embeddings", 0.15),
    ("image-0", "image", 0.1),
    ("voice-0", "voice", 0.05),
]
BATCH = 5000


def fake_row(rng: random.Random, at: float) -> tuple[Any, ...]:
    model, lane, _ = rng.choices(MODELS, [share for *_, share in MODELS])[0]
    roll = rng.random()
    status, aborted = (500, 0) if roll < 0.02 else (499, 1) if roll < 0.03 else (200, 0)
    prompt, completion = rng.randint(10, 2000), rng.randint(1, 500)
    return (
        at,
        "/v1/chat/completions",
        "openai",
        lane,
        model,
        "local",
        "llamacpp",
        status,
        status,
        None,
        round(rng.expovariate(1 / 3.0), 3),
        12.0,
        round(rng.lognormvariate(6.5, 1.0), 3),
        800,
        2400,
        aborted,
        prompt,
        completion,
        prompt + completion,
    )


async def prepare(path: Path) -> None:
    db = await connect(path)
    try:
        await migrate(db)
    finally:
        await db.close()


def seed(path: Path, events: int, now: float, *, trigger: bool = True) -> float:
    """Insert `events` rows in time order; returns the seconds it took."""
    rng = random.Random(17)
    times = sorted(now - rng.random() * DAYS * 86400 for _ in range(events))
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous = OFF")  # seeding only; the router's writer keeps NORMAL
    if not trigger:  # the cost of the rollups, measured on a copy without them
        db.execute("DROP TRIGGER analytics_events_rollup")
    started = time.perf_counter()
    for start in range(0, events, BATCH):
        rows = [fake_row(rng, at) for at in times[start : start + BATCH]]
        db.execute("BEGIN")
        db.execute(INSERT_EVENTS_JSON, (json.dumps(rows),))
        db.execute("COMMIT")
        if start and start % 100_000 == 0:
            c.log(f"seeded {start} events")
    elapsed = time.perf_counter() - started
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("ANALYZE")
    db.close()
    return elapsed


def table_rows(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        names = ("analytics_events", "analytics_rollup", "analytics_hist")
        return {n: db.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in names}


async def time_ranges(path: Path, now: float, reps: int) -> dict[str, Any]:
    settings = AnalyticsSection(database_path=path, writer_process=False, raw_retention=90 * 86400)
    store = await Store.open(path, node_id="local", analytics=settings)
    results: dict[str, Any] = {}
    try:
        for name in RANGES:
            await store.range_summary(name, now=now)  # warm the page cache
            samples = []
            for _ in range(reps):
                started = time.perf_counter()
                answer = await store.range_summary(name, now=now)
                samples.append((time.perf_counter() - started) * 1000)
            window = plan(name, now)
            started = time.perf_counter()
            exact = await store.summary(window.from_ts, window.to_ts, bucket_seconds=window.bucket)
            exact_ms = (time.perf_counter() - started) * 1000
            assert exact["totals"]["requests"] == answer["totals"]["requests"]
            results[name] = {
                "requests": answer["totals"]["requests"],
                "buckets": len(answer["buckets"]),
                "median_ms": round(statistics.median(samples), 1),
                "max_ms": round(max(samples), 1),
                "exact_raw_summary_ms": round(exact_ms, 1),
            }
            c.log(f"{name}: {results[name]}")
    finally:
        await store.close()
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=None)
    ns, rest = ap.parse_known_args(argv if argv is not None else sys.argv[1:])
    opts = c.Opts.parse(rest, __doc__ or "")
    events = ns.events or (100_000 if opts.quick else 1_000_000)
    reps = max(5, opts.reps * 3)
    now = time.time()
    with tempfile.TemporaryDirectory(prefix="analytics-range-") as tmp:
        path = Path(tmp) / "router.sqlite"
        asyncio.run(prepare(path))
        seed_s = seed(path, events, now)
        c.log(f"seeded {events} events in {seed_s:.1f} s")
        ranges = asyncio.run(time_ranges(path, now, reps))
        # After the store's open-time retention pass (minute tiers: two days).
        sizes = {**table_rows(path), "file_bytes": path.stat().st_size}
        bare = Path(tmp) / "bare.sqlite"
        asyncio.run(prepare(bare))
        sample = min(events, 200_000)
        bare_s = seed(bare, sample, now, trigger=False)
    c.save(
        opts,
        "analytics_range",
        {
            "events": events,
            "seed_seconds": round(seed_s, 1),
            "seed_us_per_event": round(seed_s / events * 1e6, 1),
            "seed_us_per_event_without_rollups": round(bare_s / sample * 1e6, 1),
            "tables": sizes,
            "reps": reps,
            "ranges": ranges,
            "target_ms": 300,
        },
    )


if __name__ == "__main__":
    main()
