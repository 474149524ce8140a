"""OpenAI answers of llama-server and vLLM -> Ollama records (the half of the translation
that reads backend answers; requests are in router/ollama/requests.py, docs/ollama.md).
Pure functions; an answer that cannot be translated is a `BadGateway`."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any, Literal

from router.errors import BadGateway
from router.forwarding.embeddings import truncate

Kind = Literal["chat", "generate"]
_DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop", "function_call": "stop"}


def rfc3339(ns: int) -> str:
    seconds, rest = divmod(ns, 1_000_000_000)
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).replace(microsecond=rest // 1000)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def done_reason(finish_reason: Any) -> str:
    """OpenAI finish_reason -> Ollama done_reason; Ollama reports tool calls as a plain stop."""
    if not isinstance(finish_reason, str) or not finish_reason:
        return "stop"
    return _DONE_REASONS.get(finish_reason, finish_reason)


def metrics(
    usage: Any,
    timings: Any,
    started_ns: int,
    now_ns: int,
    *,
    load_ns: int = 0,
    first_token_ns: int | None = None,
) -> dict[str, int]:
    """Ollama's counters and nanosecond durations.

    llama-server's `timings` are exact; a stream without them splits at the first token;
    otherwise the wall time is shared in proportion to the token counts (an estimate).
    """
    usage = usage if isinstance(usage, dict) else {}
    timings = timings if isinstance(timings, dict) else {}
    prompt_n = _count(usage.get("prompt_tokens"), timings.get("prompt_n"))
    eval_n = _count(usage.get("completion_tokens"), timings.get("predicted_n"))
    total = max(0, now_ns - started_ns)
    load = min(max(0, load_ns), total)
    rest = total - load
    prompt_ms, predicted_ms = timings.get("prompt_ms"), timings.get("predicted_ms")
    if _is_number(prompt_ms) and _is_number(predicted_ms):
        prompt_d, eval_d = int(prompt_ms * 1e6), int(predicted_ms * 1e6)
    elif first_token_ns is not None:
        prompt_d = min(rest, max(0, first_token_ns - started_ns - load))
        eval_d = rest - prompt_d
    else:
        prompt_d = rest * prompt_n // (prompt_n + eval_n) if prompt_n + eval_n else 0
        eval_d = rest - prompt_d
    return {
        "total_duration": total,
        "load_duration": load,
        "prompt_eval_count": prompt_n,
        "prompt_eval_duration": prompt_d,
        "eval_count": eval_n,
        "eval_duration": eval_d,
    }


def chat_response(
    openai: Any, public_model: str, started_ns: int, now_ns: int, *, load_ns: int = 0
) -> dict[str, Any]:
    choice = _first_choice(openai)
    msg = choice.get("message")
    msg = msg if isinstance(msg, dict) else {}
    message: dict[str, Any] = {"role": "assistant", "content": _text(msg.get("content"))}
    if thinking := reasoning_text(msg):
        message["thinking"] = thinking
    if calls := ollama_tool_calls(msg.get("tool_calls")):
        message["tool_calls"] = calls
    return _final(openai, choice, public_model, started_ns, now_ns, load_ns, message=message)


def generate_response(
    openai: Any, public_model: str, started_ns: int, now_ns: int, *, load_ns: int = 0
) -> dict[str, Any]:
    """Accepts a chat answer (prompt mode) or a /v1/completions answer (raw mode)."""
    choice = _first_choice(openai)
    msg = choice.get("message")
    if isinstance(msg, dict):
        fields = {"response": _text(msg.get("content"))}
        if thinking := reasoning_text(msg):
            fields["thinking"] = thinking
    else:
        fields = {"response": _text(choice.get("text"))}
    return _final(openai, choice, public_model, started_ns, now_ns, load_ns, **fields)


def final_record(
    kind: Kind, public_model: str, now_ns: int, reason: str, counters: dict[str, int]
) -> dict[str, Any]:
    """The closing `done: true` record of a stream (empty content, as Ollama sends it)."""
    out: dict[str, Any] = {"model": public_model, "created_at": rfc3339(now_ns)}
    if kind == "chat":
        out["message"] = {"role": "assistant", "content": ""}
    else:
        out["response"] = ""
    return out | {"done": True, "done_reason": reason} | counters


def embed_response(
    openai: Any,
    public_model: str,
    *,
    dimensions: int | None = None,
    started_ns: int = 0,
    now_ns: int = 0,
    load_ns: int = 0,
) -> dict[str, Any]:
    usage = openai.get("usage") if isinstance(openai, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    total = max(0, now_ns - started_ns)
    return {
        "model": public_model,
        "embeddings": _vectors(openai, dimensions),
        "total_duration": total,
        "load_duration": min(max(0, load_ns), total),
        "prompt_eval_count": _count(usage.get("prompt_tokens"), None),
    }


def legacy_embedding_response(openai: Any, *, dimensions: int | None = None) -> dict[str, Any]:
    """/api/embeddings answers with the single vector of its single prompt."""
    return {"embedding": _vectors(openai, dimensions)[0]}


def reasoning_text(msg: dict[str, Any]) -> str:
    # llama-server and older vLLM say reasoning_content, newer vLLM says reasoning.
    value = msg.get("reasoning_content") or msg.get("reasoning")
    return value if isinstance(value, str) else ""


def ollama_tool_calls(calls: Any) -> list[dict[str, Any]]:
    """OpenAI tool calls (arguments as JSON text) -> Ollama's (arguments as an object)."""
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadGateway("the backend returned a tool call without a function name")
        converted: dict[str, Any] = {
            "function": {"name": fn["name"], "arguments": parse_arguments(fn.get("arguments"))}
        }
        if isinstance(call.get("id"), str) and call["id"]:
            converted["id"] = call["id"]
        out.append(converted)
    return out


def parse_arguments(args: Any) -> dict[str, Any]:
    if isinstance(args, dict):
        return args
    if args is None or (isinstance(args, str) and not args.strip()):
        return {}
    try:
        parsed = json.loads(args) if isinstance(args, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise BadGateway("the backend returned tool call arguments that are not a JSON object")
    return parsed


def _final(
    openai: dict[str, Any],
    choice: dict[str, Any],
    public_model: str,
    started_ns: int,
    now_ns: int,
    load_ns: int,
    **fields: Any,
) -> dict[str, Any]:
    counters = metrics(
        openai.get("usage"), openai.get("timings"), started_ns, now_ns, load_ns=load_ns
    )
    head = {"model": public_model, "created_at": rfc3339(now_ns)}
    tail = {"done": True, "done_reason": done_reason(choice.get("finish_reason"))}
    return head | fields | tail | counters


def _first_choice(openai: Any) -> dict[str, Any]:
    choices = openai.get("choices") if isinstance(openai, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BadGateway("the backend answer has no choices")
    return choices[0]


def _vectors(openai: Any, dimensions: int | None) -> list[list[float]]:
    data = openai.get("data") if isinstance(openai, dict) else None
    if not isinstance(data, list) or not data:
        raise BadGateway("the backend answer has no embeddings")
    items = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
    vectors = []
    for item in items:
        vec = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(vec, list) or not all(_is_number(x) for x in vec):
            raise BadGateway("the backend returned an embedding that is not a list of numbers")
        vectors.append(truncate(vec, dimensions) if dimensions else vec)
    return vectors


def _count(primary: Any, fallback: Any) -> int:
    for value in (primary, fallback):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def _is_number(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
