"""P1: latency a proxy adds to a small non-streamed request, one connection.

Upstream: nginx `return 200` with a ~200-byte chat completion (bench/upstream.py), launched by
the router; direct, nginx and LiteLLM arms use the same upstream process. Client: wrk -c1
(Python client when wrk is missing). Reports per-repetition (arm p50 - direct p50), median.
"""

from __future__ import annotations

import http.client
import statistics
from typing import Any

from bench import common as c
from bench.arms import start_arms

PATH = "/v1/chat/completions"


def header_overhead(url: str, n: int) -> dict[str, Any]:
    """The router's own X-Router-Overhead-Ms over n sequential requests on one connection."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    vals = []
    for _ in range(n):
        conn.request("POST", PATH, c.CHAT_BODY, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        val = resp.getheader("X-Router-Overhead-Ms")
        if val is not None:
            vals.append(float(val))
    conn.close()
    vals.sort()
    return {
        "n": len(vals),
        "p50_ms": statistics.median(vals) if vals else None,
        "p99_ms": vals[int(0.99 * (len(vals) - 1))] if vals else None,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    mode = "nginx" if c.nginx_path() else "stream"
    c.log(f"latency: upstream={mode}, client={c.client_name()}")
    with c.workdir("latency") as wd, c.Stack() as stack:
        arms = start_arms(stack, wd, mode)
        names = list(arms.urls)
        for arm in names:  # warm-up
            c.load_test(arms.urls[arm] + PATH, c.CHAT_BODY, 1, 1)

        def run(arm: str, rep: int) -> dict[str, Any]:
            meter, bmeter = c.CpuMeter(arms.cpu_procs[arm]), c.CpuMeter(arms.backend_procs)
            res = c.load_test(arms.urls[arm] + PATH, c.CHAT_BODY, 1, opts.block)
            res["cpu_pct"], res["backend_cpu_pct"] = meter.percent(), bmeter.percent()
            return res

        results = c.interleave(names, opts.reps, run)
        header = header_overhead(arms.urls["router"], 200 if opts.quick else 1000)
    summary: dict[str, Any] = {"arms": {}}
    for arm in names:
        summary["arms"][arm] = {
            "p50_ms": c.med([r["p50_ms"] for r in results[arm]]),
            "p99_ms": c.med([r["p99_ms"] for r in results[arm]]),
            "added_p50_ms": c.per_rep(results, arm, "direct", "p50_ms", c.diff),
            "added_p99_ms": c.per_rep(results, arm, "direct", "p99_ms", c.diff),
            "cpu_pct": c.med([r["cpu_pct"] for r in results[arm]]),
        }
    adds = {
        arm: [
            a["p50_ms"] - d["p50_ms"] for a, d in zip(results[arm], results["direct"], strict=False)
        ]
        for arm in names
    }
    if "nginx" in adds:
        summary["router_added_over_nginx_added"] = c.med(
            [r / n for r, n in zip(adds["router"], adds["nginx"], strict=False) if n > 0]
        )
    data = {
        "upstream": mode,
        "client": c.client_name(),
        "connections": 1,
        "summary": summary,
        "router_overhead_header": header,
        "skipped": arms.skipped,
        "blocks": results,
    }
    c.save(opts, "latency", data)
    return data


if __name__ == "__main__":
    main()
