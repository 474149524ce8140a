"""P6: requests per second and p99 with analytics on versus off (32 connections, wrk).

Two routers, identical but for `analytics.enabled`, each launching its own nginx `return 200`
upstream; blocks alternate between them. Afterwards the SQLite store of the "on" router is
inspected: when nothing was written, the ratio measures only the in-memory part of recording.
"""

from __future__ import annotations

import sqlite3
import time
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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    mode = "nginx" if c.nginx_path() else "stream"
    c.log(f"analytics: upstream={mode}, client={c.client_name()}")
    routers: dict[str, c.Router] = {}
    with c.workdir("analytics") as wd, c.Stack() as stack:
        for arm, on in (("analytics on", True), ("analytics off", False)):
            sub = wd / arm.replace(" ", "-")
            sub.mkdir()
            model = sub / "fast.gguf"
            model.write_bytes(b"GGUF-bench")
            r = c.Router(
                sub / "router", {"fast": model}, c.write_wrapper(sub / "up", mode), analytics=on
            )
            stack.callback(r.stop)
            r.start()
            r.load("fast")
            routers[arm] = r
            c.load_test(r.url + PATH, c.CHAT_BODY, CONNS, 1)  # warm-up
        cpu = {
            a: c.tree(r.proc.pid, exclude={int(r.backend("fast")["pid"])})
            for a, r in routers.items()
            if r.proc
        }

        def run(arm: str, rep: int) -> dict[str, Any]:
            meter = c.CpuMeter(cpu[arm])
            res = c.load_test(routers[arm].url + PATH, c.CHAT_BODY, CONNS, opts.block)
            res["cpu_pct"] = meter.percent()
            return res

        results = c.interleave(list(routers), opts.reps, run)
        time.sleep(6)  # default flush_interval is 5 s
        db = routers["analytics on"].workdir / "data" / "router.sqlite"
        store = stored_events(db)
        requests = sum(r["requests"] for r in results["analytics on"])
    summary = {
        "rps_ratio_on_over_off": c.per_rep(
            results, "analytics on", "analytics off", "rps", c.ratio
        ),
        "p99_added_ms": c.per_rep(results, "analytics on", "analytics off", "p99_ms", c.diff),
        "rps": {a: c.med([r["rps"] for r in v]) for a, v in results.items()},
        "store": store,
        "requests_sent_with_analytics_on": requests,
    }
    c.log(f"analytics store after the run: {store}")
    data = {
        "upstream": mode,
        "client": c.client_name(),
        "connections": CONNS,
        "summary": summary,
        "blocks": results,
    }
    c.save(opts, "analytics", data)
    return data


if __name__ == "__main__":
    main()
