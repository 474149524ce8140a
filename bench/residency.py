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
from pathlib import Path
from typing import Any

from bench import common as c
from bench.swaps import _ask, _loads

ARMS = ("lane", "memory")


def _workload(router: c.Router, requests: int) -> dict[str, Any]:
    router.load("chat-a")
    router.load("chat-b")  # under lane this stops chat-a; under memory both stay
    loads_before = _loads(router.url)
    start = time.monotonic()
    for i in range(requests):
        _ask(router.url, 0.0, "chat-a" if i % 2 == 0 else "chat-b")
    total = time.monotonic() - start
    loads = _loads(router.url) - loads_before
    return {"total_s": total, "requests": requests, "loads": loads, "per_request": loads / requests}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    llama = c.llama_server_path()
    if not llama:
        data = {"skipped": {"all": c.skip("residency", "llama-server")}}
        c.save(opts, "residency", data)
        return data
    from router.demo_models import generate_demo_models

    requests = 10 if opts.quick else 20
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    with c.workdir("residency") as wd:
        files = generate_demo_models(wd / "demo", whisper=False)
        models = {k: files[k] for k in ("chat-a", "chat-b")}
        for rep in range(opts.reps):
            for arm in ARMS:  # interleaved: the box's load hits both arms
                router = c.Router(
                    wd / f"router-{arm}-{rep}",
                    models,
                    Path(llama),
                    extra_kcpps={k: {"contextsize": 2048} for k in models},
                    runtime=f"max_queue: 1024, residency: {arm}, stop_grace: 5s",
                )
                router.start()
                try:
                    runs[arm].append(_workload(router, requests))
                finally:
                    router.stop()
                c.log(f"{arm} rep {rep}: {runs[arm][-1]}")
    summary = {
        "requests": requests,
        "lane_total_s": c.med([r["total_s"] for r in runs["lane"]]),
        "memory_total_s": c.med([r["total_s"] for r in runs["memory"]]),
        "memory_over_lane": c.per_rep(runs, "memory", "lane", "total_s", c.ratio),
        "lane_switches_per_request": c.med([r["per_request"] for r in runs["lane"]]),
        "memory_switches_per_request": c.med([r["per_request"] for r in runs["memory"]]),
        "target": "memory / lane total time <= 0.3, 0 switches per request (issue 25)",
    }
    data = {"summary": summary, "runs": runs}
    c.save(opts, "residency", data)
    return data


if __name__ == "__main__":
    main()
