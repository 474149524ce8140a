"""Issue 35: an interactive caller's queue wait under a batch flood, with and without classes.

A router in this process (tests/support/harness.py: the real app on a real socket, backends
started by the real supervisor) in front of a fake llama-server whose answers take a known time
(`--token-rate`, `max_tokens`), one request at a time (`runtime.max_in_flight: 1`). A batch
caller sends 40 requests at once; an interactive caller sends 5, one a second, from half a
second later. Callers are named by the test-only seam of tests/support/callers.py (a header
read after auth; scoped keys through the admin API would do the same). Three arms, interleaved
per repetition:

- `arrival`: no caller named (the order before issue 35: every request equal, first come);
- `fair`: both callers interactive (round robin over callers alone);
- `classes`: the flood's caller is batch (interactive first, then round robin).

Reported: the interactive caller's 95th-percentile queue wait (`X-Tensors-Queue-Wait-Ms`, nearest
rank over all its requests of all repetitions) per arm, the batch service time, and the ratio
arrival / classes (issue 35's target: >= 10). A report, never a test.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import common as c

ARMS = ("arrival", "fair", "classes")
FLOOD = 40
PEOPLE = 5
TOKENS = 10
TOKEN_RATE = 40  # tokens per second: each answer holds the slot about 0.25 s


async def _start(tmp: Path) -> Any:
    from tests.support.callers import set_caller
    from tests.support.harness import RouterHarness

    harness = RouterHarness(tmp)
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--token-rate {TOKEN_RATE}"
    settings = harness.settings(max_in_flight=1, max_queue=128, queue_timeout=300)
    await harness.start(settings, middlewares=[set_caller])
    return harness


def _headers(arm: str, batch: bool) -> dict[str, str]:
    from router.domain import Caller, Priority
    from tests.support.callers import as_header

    if arm == "arrival":
        return {}
    priority = Priority.BATCH if batch and arm == "classes" else Priority.INTERACTIVE
    return as_header(Caller("agent" if batch else "person", priority))


async def _ask(http: httpx.AsyncClient, headers: dict[str, str], at: float) -> float:
    """One chat request sent at monotonic `at`; its queue wait in seconds."""
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    body = {"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]}
    r = await http.post("/v1/chat/completions", json=body | {"max_tokens": TOKENS}, headers=headers)
    r.raise_for_status()
    return float(r.headers["X-Tensors-Queue-Wait-Ms"]) / 1000


async def _arm(arm: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-fair-") as tmp:
        harness = await _start(Path(tmp))
        try:
            http = harness.client
            http.timeout = httpx.Timeout(300)
            await http.post("/router/v1/load", json={"model": "chat-a"})
            started = time.monotonic()
            await _ask(http, {}, started)  # warm: the fake's first answer
            t0 = time.monotonic()
            flood = [_ask(http, _headers(arm, True), t0) for _ in range(FLOOD)]
            people = [_ask(http, _headers(arm, False), t0 + 0.5 + i) for i in range(PEOPLE)]
            waits = await asyncio.gather(*flood, *people)
            elapsed = time.monotonic() - t0
        finally:
            await harness.close()
    return {
        "batch_waits": [round(w, 3) for w in waits[:FLOOD]],
        "interactive_waits": [round(w, 3) for w in waits[FLOOD:]],
        "service_s": round(elapsed / (FLOOD + PEOPLE), 3),
    }


def p95(values: list[float]) -> float | None:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)] if ordered else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    reps = 1 if opts.quick else opts.reps
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for rep in range(reps):
        for arm in ARMS:  # interleaved: the box's load hits every arm
            runs[arm].append(asyncio.run(_arm(arm)))
            row = runs[arm][-1]
            c.log(f"fair_queue {arm} rep {rep}: interactive {row['interactive_waits']}")
    summary: dict[str, Any] = {
        f"{arm}_interactive_p95_s": p95([w for r in runs[arm] for w in r["interactive_waits"]])
        for arm in ARMS
    }
    summary["service_s"] = c.med([r["service_s"] for arm in ARMS for r in runs[arm]])
    before, after = summary["arrival_interactive_p95_s"], summary["classes_interactive_p95_s"]
    summary["arrival_over_classes"] = before / max(after, 1e-3) if before is not None else None
    summary["target"] = "interactive p95 queue wait >= 10x lower with classes (issue 35)"
    data = {"summary": summary, "runs": runs}
    c.save(opts, "fair_queue", data)
    return data


def target_rows(d: dict[str, Any]) -> list[tuple[str, str, Any, float, bool, str, int]]:
    """(goal, target text, value, limit, higher is better, unit, digits) for bench/report.py."""
    s = d.get("summary") or {}
    return [
        (
            "Interactive p95 queue wait under a batch flood, without / with classes (issue 35)",
            ">= 10",
            s.get("arrival_over_classes"),
            10.0,
            True,
            "x",
            1,
        ),
    ]


if __name__ == "__main__":
    main()
