"""What reading the usage report from an answer's tail costs (router/store/rows.py `sniff_usage`).

For a scoped key's request the recorder reads it on the event loop (the quota must see it at
once), from the answer's last 4 KiB (router/forwarding/proxy.py TAIL_BYTES). Arms, per tail
shape: `whole_tail` (one regex pass over all 4 KiB: what it did before) and `sniff_usage` (the
regex from the final report's start). Tails: a streamed chat answer (SSE chunks, a final
usage + timings chunk, [DONE]), a plain JSON answer, an Ollama NDJSON stream and a stream
with no usage report at all. Reported: the median microseconds per call of each arm.

`python -m bench.usage_sniff [--quick] [--reps N]`. A report, never a test.
"""

from __future__ import annotations

import json
import statistics
import timeit
from collections.abc import Callable
from typing import Any

from bench import common as c
from router.forwarding.proxy import TAIL_BYTES
from router.store.rows import _read_usage, sniff_usage

CALLS = 20000


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def tails() -> dict[str, bytes]:
    """Each shape's last TAIL_BYTES bytes, as the proxy keeps them."""
    delta = {"choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": None}]}
    chunk = _sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", **delta})
    usage = {"prompt_tokens": 519, "completion_tokens": 900, "total_tokens": 1419}
    timings = {"cache_n": 518, "prompt_n": 1, "predicted_n": 900, "predicted_ms": 9000.5}
    final = _sse({"id": "chatcmpl-1", "choices": [], "usage": usage, "timings": timings})
    line = json.dumps({"model": "m", "message": {"content": "word "}, "done": False}).encode()
    done = {"model": "m", "done": True, "prompt_eval_count": 519, "eval_count": 900}
    plain = {"choices": [{"message": {"content": "word " * 2000}}], "usage": usage}
    shapes = {
        "sse_stream": chunk * 200 + final + b"data: [DONE]\n\n",
        "json_answer": json.dumps(plain).encode(),
        "ollama_stream": (line + b"\n") * 200 + json.dumps(done).encode() + b"\n",
        "sse_no_usage": chunk * 200 + b"data: [DONE]\n\n",
    }
    return {name: body[-TAIL_BYTES:] for name, body in shapes.items()}


def _per_call(fn: Callable[[bytes], object], tail: bytes, calls: int) -> float:
    """Microseconds per call of fn(tail)."""
    return timeit.timeit(lambda: fn(tail), number=calls) / calls * 1e6


def main(argv: list[str] | None = None) -> None:
    opts = c.Opts.parse(argv, __doc__ or "")
    calls = CALLS // 4 if opts.quick else CALLS
    arms: dict[str, Callable[[bytes], object]] = {
        "whole_tail": lambda t: _read_usage(t, 0),
        "sniff_usage": sniff_usage,
    }
    summary: dict[str, dict[str, float]] = {}
    for shape, tail in tails().items():
        summary[shape] = {}
        for arm, fn in arms.items():
            runs = [_per_call(fn, tail, calls) for _ in range(opts.reps)]
            summary[shape][f"{arm}_us"] = statistics.median(runs)
        c.log(f"{shape}: " + ", ".join(f"{k} {v:.2f}" for k, v in summary[shape].items()))
    c.save(opts, "usage_sniff", {"calls_per_rep": calls, "summary": summary})


if __name__ == "__main__":
    main()
