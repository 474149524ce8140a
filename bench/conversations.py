"""Issue 33: three conversations interleaved on one model across a swap, with and without the
conversation library, and the cached share after a router restart.

One router, the real llama-server, a text lane with room for one model: `a-on` and `a-off`
serve the same model file (`router_kv_persist: on` / `off`; `off` has no library), `chat-b` is
the tiny demo model. Per arm and repetition: first turns of three conversations X, Y, Z (about
1,100 tokens each), a swap to chat-b, then the next turn of X, Y and Z, streamed: the time to
first token of each returning turn (client side, the load of the swap back included in the
first one's wait is timed apart by an explicit load) and what llama-server processed
(`timings.prompt_n`, `cache_n`). Then, for `on` only, the router is stopped (SIGTERM: its
shutdown saves) and started again on the same state folder, and the third turn of each
conversation reports its cached share. The returning model is the larger model of the demo
shape that bench/kv_return.py uses, where the prefill dominates on a small CPU.
Reported: returning-turn TTFT with the library / without (issue 33's target <= 0.1 each), and
the cached share after the restart. A report, never a test.
"""

from __future__ import annotations

import time
from typing import Any

from bench import common as c
from bench.kv_return import _chat, _ttft, on_off_router, skipped

Messages = list[dict[str, str]]


def _first(tag: str) -> Messages:
    text = " ".join(f"{tag} line {i} of the story about the river and the mill." for i in range(45))
    return [{"role": "user", "content": text}]


def _next(messages: Messages, reply: dict[str, Any], ask: str) -> Messages:
    answer = reply["choices"][0]["message"]["content"]
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": ask}]


def _turns(router: c.Router, model: str, convs: dict[str, Messages]) -> list[Any]:
    """Each conversation's turn: (tag, messages sent, reply), for the turn after it."""
    return [(tag, m, _chat(router.url, model, m)) for tag, m in convs.items()]


def _returning(router: c.Router, model: str, rep: int) -> dict[str, Any]:
    convs = {t: _first(f"{t}{rep}") for t in "XYZ"}
    firsts = _turns(router, model, convs)
    _chat(router.url, "chat-b", [{"role": "user", "content": "hello"}])  # the swap
    started = time.monotonic()
    router.load(model)  # the swap back (a library restores its newest state here)
    load_ms = (time.monotonic() - started) * 1000.0
    turns = {tag: _ttft(router.url, model, _next(m, r, "go on")) for tag, m, r in firsts}
    ttft = {f"ttft_{tag}": turn["ttft_ms"] for tag, turn in turns.items()}
    return {"load_ms": load_ms, "turns": turns, "firsts": firsts, **ttft}


def _after_restart(router: c.Router, run: dict[str, Any]) -> dict[str, Any]:
    """Stop the router (its shutdown saves), start it again, the next turn of each."""
    messages = {tag: _next(m, r, "go on") for tag, m, r in run["firsts"]}
    replies = {tag: _chat(router.url, "a-on", m) for tag, m in messages.items()}
    router.stop()
    router.start()
    found = {}
    for tag, m in messages.items():
        found[tag] = _ttft(router.url, "a-on", _next(m, replies[tag], "and then?"))
    return found


def _shares(runs: list[dict[str, Any]], tag: str) -> float | None:
    return c.med([s for r in runs if (s := _share(r["turns"][tag])) is not None])


def _share(turn: dict[str, Any]) -> float | None:
    prompt, cached = turn.get("prompt_n"), turn.get("cache_n")
    if not isinstance(prompt, int) or not isinstance(cached, int) or prompt + cached == 0:
        return None
    return cached / (prompt + cached)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    reps = max(opts.reps, 2)
    runtime = "max_queue: 64, stop_grace: 5s, residency: lane, kv_save_timeout: 120s"
    with on_off_router("conversations", runtime) as router:
        if router is None:
            return skipped(opts, "conversations")
        runs = c.interleave(
            ["on", "off"], reps, lambda arm, rep: _returning(router, f"a-{arm}", rep)
        )
        restart = _after_restart(router, runs["on"][-1])
    kept = {a: [{k: r[k] for k in ("load_ms", "turns")} for r in rs] for a, rs in runs.items()}
    result = {"summary": _summary(runs, restart), "restart": restart, "runs": kept}
    c.log(f"conversations: {result['summary']}")
    c.save(opts, "conversations", result)
    return result


def _summary(runs: dict[str, list[dict[str, Any]]], restart: dict[str, Any]) -> dict[str, Any]:
    ratios = {t: c.per_rep(runs, "on", "off", f"ttft_{t}", c.ratio) for t in "XYZ"}
    return {
        "model": "6 layers, width 384, F32 (random weights, demo shape)",
        "ttft_on_ms": {t: c.med([r["turns"][t]["ttft_ms"] for r in runs["on"]]) for t in "XYZ"},
        "ttft_off_ms": {t: c.med([r["turns"][t]["ttft_ms"] for r in runs["off"]]) for t in "XYZ"},
        "ttft_on_over_off": ratios,
        "cached_share_on": {t: _shares(runs["on"], t) for t in "XYZ"},
        "cached_share_off": {t: _shares(runs["off"], t) for t in "XYZ"},
        "cached_share_after_restart": {t: _share(turn) for t, turn in restart.items()},
        "target": "returning-turn TTFT with the library / without <= 0.1 each (issue 33)",
    }


if __name__ == "__main__":
    main()
