"""`GET /router/v1/site/analytics?range=...`: totals, models, lanes and a timeline from the
rollups a trigger keeps, checked against a hand computation over the seeded events
(router/store/ranges.py, migration analytics_rollup)."""

from __future__ import annotations

import bisect
import random
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from router.appkeys import STORE
from router.config import AnalyticsSection
from router.store import Store
from router.store import ranges as rg
from router.store.db import connect, discover_migrations, migrate
from router.store.rows import INSERT_EVENT, row_from_raw
from tests.support.harness import RouterHarness, raw_record
from tests.support.store import open_store

NOW = 1_796_000_000.0  # the anchor passed as `now` / `to`; events are seeded before it

# --- pure parts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "buckets", "bucket", "hist_tier"),
    [
        ("1h", 60, 60, 60),
        ("24h", 96, 900, 3600),
        ("7d", 168, 3600, 86400),
        ("30d", 120, 21600, 86400),
    ],
)
def test_plan_covers_whole_buckets_ending_with_now(
    name: str, buckets: int, bucket: int, hist_tier: int
) -> None:
    now = NOW + 1234.5
    window = rg.plan(name, now)
    assert window.buckets == buckets and window.bucket == bucket
    assert window.to_ts % bucket == 0 and window.from_ts < now < window.to_ts <= now + bucket
    assert window.hist_tier == hist_tier
    assert window.hist_from <= window.from_ts and window.hist_to >= window.to_ts
    assert window.hist_from % hist_tier == 0 and window.hist_to % hist_tier == 0
    assert window.hist_to - window.hist_from < window.to_ts - window.from_ts + 2 * hist_tier


def test_nearest_rank_over_bins() -> None:
    assert rg.percentile({}, 50) is None
    hist = {10: 1, 20: 2, 30: 1}  # ranks: 1 -> bin 10, 2-3 -> bin 20, 4 -> bin 30
    assert rg.percentile(hist, 50) == rg.bin_value(20)
    assert rg.percentile(hist, 95) == rg.bin_value(30)
    assert rg.bin_value(0) == 0.0


def test_python_bin_bounds_equal_the_migration_table(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "x.sqlite")
    for migration in discover_migrations():
        db.executescript(migration.sql)
    lowers = [row[0] for row in db.execute("SELECT lower FROM analytics_bins ORDER BY bin")]
    assert lowers == rg.LOWERS


# --- hand computation --------------------------------------------------------------------

MODELS = {"alpha": "text", "beta": "text", "gamma": "embeddings"}


def seeded_events(rng: random.Random, count: int, span: float) -> list[dict[str, Any]]:
    events = []
    for _ in range(count):
        model = rng.choice([*MODELS, None])
        status = rng.choice([200] * 8 + [500, 499, 404])
        events.append(
            {
                "wall": NOW - rng.random() * span,
                "model": model,
                "lane": MODELS.get(model) if model else None,
                "status": status,
                "aborted": status == 499,
                "duration_ms": round(rng.lognormvariate(5, 1.2), 3),
                "queue_wait_ms": round(rng.choice([0.0, rng.expovariate(1 / 4)]), 3),
                "prompt": rng.randint(1, 50),
                "completion": rng.randint(1, 50),
            }
        )
    return events


def as_raw(e: dict[str, Any]) -> tuple[Any, ...]:
    usage = f'{{"usage":{{"prompt_tokens":{e["prompt"]},"completion_tokens":{e["completion"]}}}}}'
    return raw_record(
        wall=e["wall"],
        model=e["model"],
        lane=e["lane"],
        status=e["status"],
        aborted=e["aborted"],
        duration_s=e["duration_ms"] / 1000.0,
        queue_wait_ms=e["queue_wait_ms"],
        tail=usage.encode(),
    )


def reported(value: float) -> float:
    """What the histogram reports for an exact value: the middle of the bin it falls in."""
    return rg.bin_value(bisect.bisect_right(rg.LOWERS, value) - 1)


def exact_rank(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    return ordered[max(1, -(-pct * len(ordered) // 100)) - 1]


def hand_cell(events: list[dict[str, Any]], *, percentiles: bool = True) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "requests": len(events),
        "errors": sum(1 for e in events if e["status"] >= 400 and not e["aborted"]),
        "aborted": sum(1 for e in events if e["aborted"]),
        "tokens": {
            "prompt": sum(e["prompt"] for e in events),
            "completion": sum(e["completion"] for e in events),
            "total": sum(e["prompt"] + e["completion"] for e in events),
        },
    }
    for metric in rg.METRICS:
        values = [e[metric] for e in events]
        cell[metric] = {
            "p50": reported(exact_rank(values, 50)) if percentiles and values else None,
            "p95": reported(exact_rank(values, 95)) if percentiles and values else None,
            "mean": round(sum(values) / len(values), 3) if values else None,
        }
    return cell


def hand_summary(events: list[dict[str, Any]], window: rg.Window) -> dict[str, Any]:
    inside = [e for e in events if window.from_ts <= e["wall"] < window.to_ts]
    # Percentiles cover the histogram periods the window touches (docs/store.md).
    touched = [e for e in events if window.hist_from <= e["wall"] < window.hist_to]
    groups: dict[str, dict[Any, list[dict[str, Any]]]] = {"model": {}, "lane": {}}
    for e in inside:
        for key in groups:
            groups[key].setdefault(e[key], [])
    for key in groups:
        for e in inside:
            groups[key][e[key]].append(e)

    def rows(key: str) -> list[dict[str, Any]]:
        out = []
        for value in sorted(groups[key], key=lambda v: v or ""):
            cell = hand_cell(groups[key][value])
            cell.update(
                {m: hand_cell([e for e in touched if e[key] == value])[m] for m in rg.METRICS}
            )
            for m in rg.METRICS:
                cell[m]["mean"] = hand_cell(groups[key][value])[m]["mean"]
            out.append({key: value, **cell})
        return out

    totals = hand_cell(inside)
    for m in rg.METRICS:
        totals[m] = {**hand_cell(touched)[m], "mean": totals[m]["mean"]}
    per_bucket: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in inside:
        per_bucket[int((e["wall"] - window.from_ts) // window.bucket)].append(e)
    buckets = [
        {"start": window.from_ts + k * window.bucket, **hand_cell(per_bucket[k], percentiles=False)}
        for k in range(window.buckets)
    ]
    return {"totals": totals, "models": rows("model"), "lanes": rows("lane"), "buckets": buckets}


def close_means(got: Any, want: Any) -> Any:
    """Means are sums over rows in a different order: equal to 1e-3 ms, not to the bit."""
    if isinstance(got, dict) and isinstance(want, dict):
        assert got.keys() >= want.keys(), (got.keys(), want.keys())
        return {
            k: close_means(got[k], want[k])
            if k != "mean"
            else (pytest.approx(want[k], abs=2e-3) if want[k] is not None else None)
            for k in want
        }
    if isinstance(got, list) and isinstance(want, list):
        assert len(got) == len(want)
        return [close_means(g, w) for g, w in zip(got, want, strict=True)]
    return want


KEEP_ALL = 10 * 365 * 86400.0  # raw_retention: the seeded NOW may be in the future


@pytest.mark.parametrize("name", list(rg.RANGES))
async def test_range_numbers_equal_a_hand_computation(tmp_path: Path, name: str) -> None:
    rng = random.Random(name)
    span = rg.RANGES[name].span * 1.3  # some events fall before the window
    events = seeded_events(rng, 600, span)
    # The writer process and the trigger, as in production.
    store = await open_store(tmp_path, raw_retention=KEEP_ALL)
    try:
        for e in events:
            store.record_raw(as_raw(e))
        got = await store.range_summary(name, now=NOW)
    finally:
        await store.close()
    window = rg.plan(name, NOW)
    want = hand_summary(events, window)
    assert got["from"] == window.from_ts and got["to"] == window.to_ts
    assert got["percentiles_from"] == window.hist_from and got["node_id"] == "n1"
    assert got["totals"]["requests"] > 300  # the seed really fills the window
    for part in ("totals", "models", "lanes", "buckets"):
        assert got[part] == close_means(got[part], want[part]), part


async def test_histogram_percentiles_stay_within_the_bin_error(tmp_path: Path) -> None:
    rng = random.Random(5)
    events = seeded_events(rng, 400, 3000)
    store = await open_store(tmp_path, raw_retention=KEEP_ALL, writer_process=False)
    try:
        for e in events:
            store.record_raw(as_raw(e))
        got = await store.range_summary("1h", now=NOW)
    finally:
        await store.close()
    window = rg.plan("1h", NOW)
    durations = [e["duration_ms"] for e in events if window.hist_from <= e["wall"] < window.hist_to]
    for name, pct in rg.QUANTILES.items():
        exact = exact_rank(durations, pct)
        assert abs(got["totals"]["duration_ms"][name] - exact) <= 0.045 * exact


async def test_a_migrated_store_backfills_what_it_already_held(tmp_path: Path) -> None:
    rng = random.Random(9)
    now = time.time()
    events = seeded_events(rng, 300, 6 * 86400)
    for e in events:
        e["wall"] += now - NOW
    rows = [row_from_raw(as_raw(e)) for e in events]
    # A store from before the rollups, with the rows an older router wrote...
    path = tmp_path / "old.sqlite"
    rollup = next(m for m in discover_migrations() if "rollup" in m.name)
    db = await connect(path)
    await migrate(db, [m for m in discover_migrations() if m.version < rollup.version])
    # (the columns it had: key_name came later, with the scoped keys)
    await db.executemany(
        INSERT_EVENT.replace(", key_name", "").replace(", ?)", ")"), [r[:-1] for r in rows]
    )
    await db.close()
    # ... opened by this router (which migrates), against one that saw the rows arrive.
    migrated = await Store.open(path, node_id="local", analytics=AnalyticsSection())
    fresh = await Store.open(
        tmp_path / "fresh.sqlite", node_id="local", analytics=AnalyticsSection()
    )
    try:
        for e in events:
            fresh.record_raw(as_raw(e))
        for name in ("1h", "24h", "7d", "30d"):
            old, new = await migrated.range_summary(name), await fresh.range_summary(name)
            assert old["totals"]["requests"] > 0 or name == "1h"
            assert old == close_means(old, new), name
    finally:
        await migrated.close()
        await fresh.close()


async def test_old_rollups_age_out_with_retention(tmp_path: Path) -> None:
    store = await open_store(tmp_path, raw_retention=86400.0, writer_process=False)
    now = time.time()
    try:
        for age in (0, 3 * 86400, 10 * 86400):
            store.record_raw(
                as_raw({**seeded_events(random.Random(1), 1, 1)[0], "wall": now - age})
            )
        await store.flush()
        await store.enforce_retention()
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / "router.sqlite") as db:
        oldest = dict(db.execute("SELECT tier, MIN(start) FROM analytics_hist GROUP BY tier"))
        counts = dict(db.execute("SELECT tier, MIN(start) FROM analytics_rollup GROUP BY tier"))
    assert set(oldest) == {60, 3600, 86400} and set(counts) == {60, 3600}
    for tier in (60, 3600):  # two days of minutes (and of hourly histograms)
        assert oldest[tier] >= now - 2 * 86400 - tier
    assert counts[60] >= now - 2 * 86400 - 60
    assert counts[3600] >= now - 2 * 86400 - 3600 and oldest[86400] >= now - 2 * 86400 - 86400


# --- over HTTP -----------------------------------------------------------------------------


async def test_the_route_answers_one_call_per_range(harness: RouterHarness) -> None:
    client = await harness.start()
    assert harness.app is not None
    store = harness.app[STORE]
    for e in seeded_events(random.Random(3), 50, 3000):
        store.record_raw(as_raw(e))
    query = {"range": "1h", "to": str(NOW)}
    response = await client.get("/router/v1/site/analytics", params=query)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["nodes"] == ["local"] and body["range"] == "1h" and len(body["buckets"]) == 60
    assert body["totals"]["requests"] == sum(b["requests"] for b in body["buckets"])
    assert {row["model"] for row in body["models"]} <= {*MODELS, None}
    filtered = await client.get("/router/v1/site/analytics", params={**query, "model": "alpha"})
    assert {row["model"] for row in filtered.json()["models"]} <= {"alpha"}
    for bad in (
        {"range": "2h"},
        {"range": "1h", "from": "1"},
        {"range": "1h", "bucket_seconds": "60"},
    ):
        refused = await client.get("/router/v1/site/analytics", params=bad)
        assert refused.status_code == 400, bad
    assert (
        await client.get("/router/v1/site/analytics", params={"range": "1h", "node_id": "x"})
    ).status_code == 404
    # The raw-event summary keeps its parameters.
    old = await client.get(
        "/router/v1/site/analytics",
        params={"from": str(NOW - 3600), "to": str(NOW), "bucket_seconds": "600"},
    )
    assert old.status_code == 200 and "routes" in old.json()
