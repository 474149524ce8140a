"""Issue 26: the alternating workload under `queue_order: fifo` and `grouped`, real llama-server.

Two clients on one text lane with room for one model: one sends chat-a requests, the other
chat-b, each every GAP seconds without waiting for its answers, so arrivals alternate A, B.
Per arm and repetition: the total time from the first request to the last answer, the loads
(the router's `tensor_router_loads_total`), and the longest `X-Tensors-Queue-Wait-Ms`.
Reported: grouped / FIFO total time (issue 26's target <= 0.5). A report, never a test.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import common as c

GAP = 0.2
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def _ask(url: str, at: float, model: str) -> float:
    time.sleep(max(0.0, at - time.monotonic()))  # the arrival schedule
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps({**BODY, "model": model}).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        resp.read()
        return float(resp.headers.get("X-Tensors-Queue-Wait-Ms", "nan"))


def _loads(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    found = re.findall(r'^tensor_router_loads_total\{[^}]*result="ok"[^}]*\} (\S+)$', text, re.M)
    return sum(float(v) for v in found)


def _workload(router: c.Router, per_client: int) -> dict[str, Any]:
    router.load("chat-a")
    loads_before = _loads(router.url)
    start = time.monotonic() + 0.2
    arrivals = [
        (start + i * GAP + half, model)
        for i in range(per_client)
        for half, model in ((0.0, "chat-a"), (GAP / 2, "chat-b"))
    ]
    with ThreadPoolExecutor(len(arrivals)) as pool:
        waits = list(pool.map(lambda a: _ask(router.url, *a), arrivals))
    total = time.monotonic() - start
    return {
        "total_s": total,
        "loads": _loads(router.url) - loads_before,
        "max_wait_ms": max(waits),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    llama = c.llama_server_path()
    if not llama:
        data = {"skipped": {"all": c.skip("swaps", "llama-server")}}
        c.save(opts, "swaps", data)
        return data
    from router.demo_models import generate_demo_models

    per_client = 4 if opts.quick else 8
    runs: dict[str, list[dict[str, Any]]] = {"fifo": [], "grouped": []}
    with c.workdir("swaps") as wd:
        files = generate_demo_models(wd / "demo", whisper=False)
        models = {k: files[k] for k in ("chat-a", "chat-b")}
        for rep in range(opts.reps):
            for order in ("fifo", "grouped"):  # interleaved: the box's load hits both arms
                router = c.Router(
                    wd / f"router-{order}-{rep}",
                    models,
                    Path(llama),
                    extra_kcpps={k: {"contextsize": 2048} for k in models},
                    # One model per lane: the swap path this benchmark measures.
                    runtime=f"max_queue: 1024, queue_order: {order}, residency: lane, stop_grace: 5s",
                )
                router.start()
                try:
                    runs[order].append(_workload(router, per_client))
                finally:
                    router.stop()
                c.log(f"{order} rep {rep}: {runs[order][-1]}")
    fifo = c.med([r["total_s"] for r in runs["fifo"]])
    grouped = c.med([r["total_s"] for r in runs["grouped"]])
    summary = {
        "per_client": per_client,
        "gap_s": GAP,
        "fifo_total_s": fifo,
        "grouped_total_s": grouped,
        "grouped_over_fifo": c.per_rep(runs, "grouped", "fifo", "total_s", c.ratio),
        "fifo_loads": c.med([r["loads"] for r in runs["fifo"]]),
        "grouped_loads": c.med([r["loads"] for r in runs["grouped"]]),
        "target": "grouped / FIFO total time <= 0.5 (issue 26)",
    }
    data = {"summary": summary, "runs": runs}
    c.save(opts, "swaps", data)
    return data


if __name__ == "__main__":
    main()
