"""Issue 25: two demo models alternating, `runtime.residency: memory` against `lane`, real
llama-server.

One client alternates chat-a and chat-b, each request after the previous answer. Both models
fit the host budget, so under `memory` they stay resident (no switch after their first
loads); under `lane` every request switches the text lane to the other model. Per arm and
repetition: the total time of the alternating requests and the loads during them (the router's
`tensor_router_loads_total`), after both models were loaded once (warm page cache). Reported:
model switches (loads) per request (lane: 1; target under memory: 0) and memory / lane total
time (issue 25's target <= 0.3). A report, never a test.
"""

from __future__ import annotations

import time
from typing import Any

from bench import alternating
from bench import common as c

ARMS = ("lane", "memory")


def _workload(router: c.Router, requests: int) -> dict[str, Any]:
    router.load("chat-a")
    router.load("chat-b")  # under lane this stops chat-a; under memory both stay
    loads_before = alternating.loads(router.url)
    start = time.monotonic()
    for i in range(requests):
        alternating.ask(router.url, 0.0, "chat-a" if i % 2 == 0 else "chat-b")
    total = time.monotonic() - start
    loads = alternating.loads(router.url) - loads_before
    return {"total_s": total, "requests": requests, "loads": loads, "per_request": loads / requests}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    arms = {arm: f"max_queue: 1024, residency: {arm}, stop_grace: 5s" for arm in ARMS}
    requests = 10 if opts.quick else 20
    return alternating.compare(opts, "residency", arms, _workload, _summary, requests)


def _summary(runs: alternating.Runs, requests: int) -> dict[str, Any]:
    return {
        "requests": requests,
        **alternating.medians(runs, "total_s"),  # lane_total_s, memory_total_s
        "memory_over_lane": c.per_rep(runs, "memory", "lane", "total_s", c.ratio),
        **alternating.medians(runs, "per_request", "switches_per_request"),
        "target": "memory / lane total time <= 0.3, 0 switches per request (issue 25)",
    }


if __name__ == "__main__":
    main()
