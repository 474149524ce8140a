"""Issue 26: the alternating workload under `queue_order: fifo` and `grouped`, real llama-server.

Two clients on one text lane with room for one model: one sends chat-a requests, the other
chat-b, each every GAP seconds without waiting for its answers, so arrivals alternate A, B.
Per arm and repetition: the total time from the first request to the last answer, the loads
(the router's `tensor_router_loads_total`), and the longest `X-Tensors-Queue-Wait-Ms`.
Reported: grouped / FIFO total time (issue 26's target <= 0.5). A report, never a test.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import alternating
from bench import common as c

GAP = 0.2


def _workload(router: c.Router, per_client: int) -> dict[str, Any]:
    router.load("chat-a")
    loads_before = alternating.loads(router.url)
    start = time.monotonic() + 0.2
    arrivals = [
        (start + i * GAP + half, model)
        for i in range(per_client)
        for half, model in ((0.0, "chat-a"), (GAP / 2, "chat-b"))
    ]
    with ThreadPoolExecutor(len(arrivals)) as pool:
        waits = list(pool.map(lambda a: alternating.ask(router.url, *a), arrivals))
    total = time.monotonic() - start
    return {
        "total_s": total,
        "loads": alternating.loads(router.url) - loads_before,
        "max_wait_ms": max(waits),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    # One model per lane: the swap path this benchmark measures.
    arms = {
        order: f"max_queue: 1024, queue_order: {order}, residency: lane, stop_grace: 5s"
        for order in ("fifo", "grouped")
    }
    per_client = 4 if opts.quick else 8
    return alternating.compare(opts, "swaps", arms, _workload, _summary, per_client)


def _summary(runs: alternating.Runs, per_client: int) -> dict[str, Any]:
    return {
        "per_client": per_client,
        "gap_s": GAP,
        **alternating.medians(runs, "total_s"),  # fifo_total_s, grouped_total_s
        "grouped_over_fifo": c.per_rep(runs, "grouped", "fifo", "total_s", c.ratio),
        **alternating.medians(runs, "loads"),  # fifo_loads, grouped_loads
        "target": "grouped / FIFO total time <= 0.5 (issue 26)",
    }


if __name__ == "__main__":
    main()
