"""P6: requests per second and p99 with analytics on versus off (32 connections, wrk).

Routers identical but for `analytics.enabled`, each launching its own nginx `return 200`
upstream. One Python process differs from an identical other by a few per cent (hash seed,
memory layout: an A/A run of two "off" routers measured 0.96-0.99), more than the effect
measured here. So each arm runs several router processes and every repetition visits each of
them once, alternating on and off; the ratio compares the arms' mean RPS within a
repetition, and `same_arm_spread` reports the process-to-process noise floor beside it.
Afterwards the SQLite stores of the "on" routers are inspected: when nothing was written, the
ratio measures only the in-memory part of recording.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import common as c

PATH = "/v1/chat/completions"
CONNS = 32


def stored_events(db: Path) -> dict[str, Any]:
    if not db.exists():
        return {"exists": False, "rows": 0}
    rows: dict[str, int] = {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            rows[name] = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
    return {"exists": True, "bytes": db.stat().st_size, "tables": rows}


def arm_of(name: str) -> str:
    return name.split("#")[0]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    mode = "nginx" if c.nginx_path() else "stream"
    instances = 2 if opts.quick else 3
    c.log(f"analytics: upstream={mode}, client={c.client_name()}, {instances} routers per arm")
    routers: dict[str, c.Router] = {}
    with c.workdir("analytics") as wd, c.Stack() as stack:
        for index in range(1, instances + 1):
            for arm, on in (("analytics on", True), ("analytics off", False)):
                name = f"{arm}#{index}"
                sub = wd / name.replace(" ", "-").replace("#", "-")
                sub.mkdir()
                model = sub / "fast.gguf"
                model.write_bytes(b"GGUF-bench")
                up = c.write_wrapper(sub / "up", mode)
                r = c.Router(sub / "router", {"fast": model}, up, analytics=on)
                stack.callback(r.stop)
                r.start()
                r.load("fast")
                routers[name] = r
                c.load_test(r.url + PATH, c.CHAT_BODY, CONNS, 2)  # warm-up
        cpu = {
            a: c.tree(r.proc.pid, exclude={int(r.backend("fast")["pid"])})
            for a, r in routers.items()
            if r.proc
        }

        def run(name: str, rep: int) -> dict[str, Any]:
            meter = c.CpuMeter(cpu[name])
            res = c.load_test(routers[name].url + PATH, c.CHAT_BODY, CONNS, opts.block)
            res["cpu_pct"] = meter.percent()
            return res

        blocks = c.interleave(list(routers), opts.reps, run)
        time.sleep(6)  # default flush_interval is 5 s
        stores = {
            name: stored_events(r.workdir / "data" / "router.sqlite")
            for name, r in routers.items()
            if r.analytics
        }
    by_arm: dict[str, list[dict[str, Any]]] = {"analytics on": [], "analytics off": []}
    for name, results in blocks.items():
        by_arm[arm_of(name)].extend(results)
    requests = sum(r["requests"] for r in by_arm["analytics on"])
    rows = sum(s.get("tables", {}).get("analytics_events", 0) for s in stores.values())
    summary = {
        "rps_ratio_on_over_off": c.per_rep(mean_per_rep(by_arm), "on", "off", "rps", c.ratio),
        "p99_added_ms": c.per_rep(mean_per_rep(by_arm), "on", "off", "p99_ms", c.diff),
        "rps": {a: c.med([r["rps"] for r in v]) for a, v in by_arm.items()},
        "same_arm_spread": spread(blocks),
        "requests_sent_with_analytics_on": requests,
        "events_stored": rows,
    }
    c.log(f"analytics stores after the run: {rows} events for {requests} requests")
    data = {
        "upstream": mode,
        "client": c.client_name(),
        "connections": CONNS,
        "routers_per_arm": instances,
        "summary": summary,
        "stores": stores,
        "blocks": blocks,
    }
    c.save(opts, "analytics", data)
    return data


def mean_per_rep(by_arm: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Per arm, one pseudo-block per repetition: the mean over that arm's routers."""
    out: dict[str, list[dict[str, Any]]] = {}
    for arm, results in by_arm.items():
        reps = sorted({r["rep"] for r in results})
        out[arm.removeprefix("analytics ")] = [
            {key: _mean(r.get(key) for r in results if r["rep"] == rep) for key in KEYS}
            for rep in reps
        ]
    return out


KEYS = ("rps", "p99_ms")


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def spread(blocks: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Within each arm: fastest router's median RPS over the slowest's (the A/A noise floor)."""
    medians: dict[str, list[float]] = {}
    for name, results in blocks.items():
        medians.setdefault(arm_of(name), []).append(statistics.median(r["rps"] for r in results))
    return {arm: round(max(v) / min(v), 4) for arm, v in medians.items() if min(v) > 0}


if __name__ == "__main__":
    main()
