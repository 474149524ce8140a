"""P5: requests per second of small non-streamed requests at 32 connections.

Upstream: nginx `return 200` (one worker), launched by the router; every arm reuses that
process. Proxies get one worker/process each (nginx worker_processes 1, LiteLLM --num_workers
1, the router is one process). Client: wrk -t1 -c32 (Python client when wrk is missing).
"""

from __future__ import annotations

from typing import Any

from bench import common as c
from bench.arms import start_arms

PATH = "/v1/chat/completions"
CONNS = 32


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    mode = "nginx" if c.nginx_path() else "stream"
    c.log(f"rps: upstream={mode}, client={c.client_name()}, {CONNS} connections")
    with c.workdir("rps") as wd, c.Stack() as stack:
        arms = start_arms(stack, wd, mode)
        names = list(arms.urls)
        for arm in names:  # warm-up
            c.load_test(arms.urls[arm] + PATH, c.CHAT_BODY, CONNS, 1)

        def run(arm: str, rep: int) -> dict[str, Any]:
            meter, bmeter = c.CpuMeter(arms.cpu_procs[arm]), c.CpuMeter(arms.backend_procs)
            res = c.load_test(arms.urls[arm] + PATH, c.CHAT_BODY, CONNS, opts.block)
            res["cpu_pct"], res["backend_cpu_pct"] = meter.percent(), bmeter.percent()
            return res

        results = c.interleave(names, opts.reps, run)
    summary: dict[str, Any] = {"arms": {}}
    for arm in names:
        summary["arms"][arm] = {
            "rps": c.med([r["rps"] for r in results[arm]]),
            "p99_ms": c.med([r["p99_ms"] for r in results[arm]]),
            "ratio_to_direct": c.per_rep(results, arm, "direct", "rps", c.ratio),
            "cpu_pct": c.med([r["cpu_pct"] for r in results[arm]]),
            "backend_cpu_pct": c.med([r["backend_cpu_pct"] for r in results[arm]]),
            "errors": sum(r.get("errors", 0) + r.get("non2xx", 0) for r in results[arm]),
        }
    for other in ("nginx", "litellm"):
        if other in results:
            summary[f"router_over_{other}"] = c.per_rep(results, "router", other, "rps", c.ratio)
    data = {
        "upstream": mode,
        "client": c.client_name(),
        "connections": CONNS,
        "summary": summary,
        "skipped": arms.skipped,
        "blocks": results,
    }
    c.save(opts, "rps", data)
    return data


if __name__ == "__main__":
    main()
