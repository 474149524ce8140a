"""Ollama /api/chat, /api/generate, /api/embed(dings) <-> OpenAI routes of llama-server and vLLM.

Pure functions, no I/O: the Ollama handler resolves the model and calls `*_request`; the
OpenAI body is forwarded and the answer goes through `*_response` (or, streamed, through
`router.ollama.stream.NdjsonStream`), both applied by `router.ollama.translation`. docs/ollama.md holds the mapping table and why each
choice was made. Every refusal is a `BadRequest`; a backend answer we cannot translate is a
`BadGateway`. Times are wall-clock nanoseconds (`time.time_ns()`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any, Literal

from router.errors import BadRequest
from router.ollama.responses import rfc3339

LoadKind = Literal["chat", "generate", "embed", "embeddings"]

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"

_ROLES = frozenset({"system", "user", "assistant", "tool"})
_REFUSED = ("suffix", "template", "context")
_THINK_LEVELS = frozenset({"low", "medium", "high"})

# Where llama-server and vLLM name a sampler differently both names go out; each backend
# ignores the field it does not know, so one body serves both.
_FLOAT_OPTIONS: dict[str, tuple[str, ...]] = {
    "temperature": ("temperature",),
    "top_p": ("top_p",),
    "min_p": ("min_p",),
    "presence_penalty": ("presence_penalty",),
    "frequency_penalty": ("frequency_penalty",),
    "repeat_penalty": ("repeat_penalty", "repetition_penalty"),
}
_INT_OPTIONS: dict[str, tuple[str, ...]] = {
    "top_k": ("top_k",),
    "seed": ("seed",),
    "repeat_last_n": ("repeat_last_n",),
}
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


# ---------------------------------------------------------------------------- requests


def chat_request(body: Any, local_model: str) -> tuple[str, dict[str, Any]]:
    """An Ollama /api/chat body -> (path, OpenAI chat completions body)."""
    _check_common(body)
    out: dict[str, Any] = {"model": local_model, "messages": _messages(body.get("messages"))}
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise BadRequest("tools must be a list of objects", param="tools")
        if tools:
            out["tools"] = tools
    out.update(_generation_fields(body, chat=True))
    return CHAT_PATH, out


def generate_request(body: Any, local_model: str) -> tuple[str, dict[str, Any]]:
    """An Ollama /api/generate body -> chat messages, or /v1/completions when `raw` is true.

    Raw mode skips the chat template, so fields that only feed the template (`system`,
    `think`) are ignored there, as Ollama does; images have no place in /v1/completions.
    """
    _check_common(body)
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("prompt must be a non-empty string", param="prompt")
    raw = body.get("raw")
    if raw is not None and not isinstance(raw, bool):
        raise BadRequest("raw must be a boolean", param="raw")
    images = _images(body.get("images"), "images")
    if raw:
        if images:
            raise BadRequest("images cannot be used with raw prompts", param="images")
        out: dict[str, Any] = {"model": local_model, "prompt": prompt}
        out.update(_generation_fields(body, chat=False))
        return COMPLETIONS_PATH, out
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise BadRequest("system must be a string", param="system")
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": _user_content(prompt, images)})
    out = {"model": local_model, "messages": messages}
    out.update(_generation_fields(body, chat=True))
    return CHAT_PATH, out


def embed_request(body: Any, local_model: str) -> tuple[str, dict[str, Any]]:
    """/api/embed (`input`: string or list) and legacy /api/embeddings (`prompt`).

    `dimensions` is validated here but not forwarded: llama-server has no such field, so
    `embed_response` truncates and renormalises itself (pass it the same value).
    """
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    embed_dimensions(body)
    text = body.get("input")
    if text is None:
        text = body.get("prompt")
        if not isinstance(text, str) or not text:
            raise BadRequest("input must be a string or a list of strings", param="input")
    elif isinstance(text, list):
        if not text or not all(isinstance(t, str) for t in text):
            raise BadRequest("input must be a non-empty list of strings", param="input")
    elif not isinstance(text, str) or not text:
        raise BadRequest("input must be a string or a list of strings", param="input")
    return EMBEDDINGS_PATH, {"model": local_model, "input": text, "encoding_format": "float"}


def canonical_name(name: str) -> str:
    """Ollama's default tag: `name:latest` is `name` (a config ID never holds a colon)."""
    return name.removesuffix(":latest")


def embed_dimensions(body: dict[str, Any]) -> int | None:
    dims = body.get("dimensions")
    if dims is None:
        return None
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise BadRequest("dimensions must be a positive integer", param="dimensions")
    return dims


def is_load_request(kind: LoadKind, body: Any) -> bool:
    """Ollama answers an empty chat/prompt/input by loading the model and generating nothing."""
    if not isinstance(body, dict):
        return False
    field = {"chat": "messages", "generate": "prompt", "embed": "input", "embeddings": "prompt"}
    value = body.get(field[kind])
    if kind == "embed" and value is None and "prompt" in body:
        value = body.get("prompt")
    return value is None or value in ("", [])


def load_response(
    kind: LoadKind, public_model: str, now_ns: int, reason: Literal["load", "unload"] = "load"
) -> dict[str, Any]:
    """The answer to a request with nothing to generate: the model was loaded (or, with
    `keep_alive: 0`, unloaded); embeddings have no `done_reason`."""
    if kind == "embeddings":
        return {"embedding": []}
    if kind == "embed":
        return {"model": public_model, "embeddings": []}
    out: dict[str, Any] = {"model": public_model, "created_at": rfc3339(now_ns)}
    if kind == "chat":
        out["message"] = {"role": "assistant", "content": ""}
    else:
        out["response"] = ""
    return out | {"done": True, "done_reason": reason}


def _check_common(body: Any) -> None:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for name in _REFUSED:
        if body.get(name) not in (None, "", []):
            raise BadRequest(f"{name} is not supported by this backend", param=name)


def _generation_fields(body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
    stream = body.get("stream", True)
    if stream is None:
        stream = True
    if not isinstance(stream, bool):
        raise BadRequest("stream must be a boolean", param="stream")
    out: dict[str, Any] = {"stream": stream}
    if stream:
        out["stream_options"] = {"include_usage": True}
    out.update(_options(body.get("options")))
    out.update(_format(body.get("format"), chat=chat))
    if chat:
        out.update(_think(body.get("think")))
    return out


def _options(options: Any) -> dict[str, Any]:
    """Known options are checked and mapped; unknown ones (num_ctx, num_gpu, ...) are ignored
    because Ollama clients send them routinely and Ollama itself only warns."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise BadRequest("options must be an object", param="options")
    out: dict[str, Any] = {}
    for name, targets in _FLOAT_OPTIONS.items():
        if options.get(name) is not None:
            out.update(dict.fromkeys(targets, _number(options[name], name)))
    for name, targets in _INT_OPTIONS.items():
        if options.get(name) is not None:
            out.update(dict.fromkeys(targets, int(_number(options[name], name))))
    if options.get("num_predict") is not None:
        limit = int(_number(options["num_predict"], "num_predict"))
        if limit > 0:  # Ollama's 0, -1 and -2 all mean "no fixed limit"
            out["max_tokens"] = limit
    stop = options.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise BadRequest("options.stop must be a list of strings", param="options.stop")
        if stop:
            out["stop"] = stop
    return out


def _number(value: Any, name: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"options.{name} must be a number", param=f"options.{name}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadRequest(f"options.{name} must be finite", param=f"options.{name}")
    return value


def _format(fmt: Any, *, chat: bool) -> dict[str, Any]:
    if fmt is None or fmt == "":
        return {}
    if fmt == "json":
        schema: dict[str, Any] = {"type": "object"}
        response_format: dict[str, Any] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        schema = fmt
        response_format = {"type": "json_schema", "json_schema": {"name": "format", "schema": fmt}}
    else:
        raise BadRequest('format must be "json" or a JSON schema object', param="format")
    if chat:
        return {"response_format": response_format}
    # llama-server's /v1/completions reads its native json_schema, vLLM's reads response_format.
    return {"response_format": response_format, "json_schema": schema}


def _think(think: Any) -> dict[str, Any]:
    if think is None:
        return {}
    if isinstance(think, bool):
        return {"chat_template_kwargs": {"enable_thinking": think}}
    if isinstance(think, str) and think in _THINK_LEVELS:
        return {"chat_template_kwargs": {"enable_thinking": True, "reasoning_effort": think}}
    raise BadRequest('think must be true, false, "low", "medium" or "high"', param="think")


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages must be a non-empty list", param="messages")
    out: list[dict[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (call id, function name) not yet answered by a tool
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a role", param="messages")
        role = msg["role"]
        if role not in _ROLES:
            raise BadRequest(f"messages[{i}].role {role!r} is not supported", param="messages")
        content = msg.get("content")
        if content is not None and not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string", param="messages")
        images = _images(msg.get("images"), f"messages[{i}].images")
        if images and role != "user":
            raise BadRequest(f"messages[{i}]: only user messages take images", param="messages")
        converted: dict[str, Any] = {"role": role, "content": _user_content(content or "", images)}
        if role == "assistant":
            pending = _assistant_extras(i, msg, converted)
        elif role == "tool":
            _tool_extras(msg, converted, pending)
        out.append(converted)
    return out


def _assistant_extras(i: int, msg: dict[str, Any], out: dict[str, Any]) -> list[tuple[str, str]]:
    thinking = msg.get("thinking")
    if isinstance(thinking, str) and thinking:
        out["reasoning_content"] = thinking
    calls = msg.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise BadRequest(f"messages[{i}].tool_calls must be a list", param="messages")
    openai_calls = [_openai_tool_call(i, j, call) for j, call in enumerate(calls)]
    if openai_calls:
        out["tool_calls"] = openai_calls
    return [(c["id"], c["function"]["name"]) for c in openai_calls]


def _openai_tool_call(i: int, j: int, call: Any) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise BadRequest(f"messages[{i}].tool_calls[{j}] needs function.name", param="messages")
    args = fn.get("arguments")
    if args is None or isinstance(args, dict):
        args = json.dumps(args or {})
    elif not isinstance(args, str):
        raise BadRequest(f"messages[{i}].tool_calls[{j}] arguments must be an object")
    call_id = call.get("id")
    # OpenAI templates pair tool results with calls by id; Ollama history often has none.
    if not isinstance(call_id, str) or not call_id:
        call_id = f"call_{i}_{j}"
    return {"id": call_id, "type": "function", "function": {"name": fn["name"], "arguments": args}}


def _tool_extras(msg: dict[str, Any], out: dict[str, Any], pending: list[tuple[str, str]]) -> None:
    name = msg.get("tool_name")
    if isinstance(name, str) and name:
        out["name"] = name
    call_id = msg.get("tool_call_id")
    if isinstance(call_id, str) and call_id:
        out["tool_call_id"] = call_id
        pending[:] = [p for p in pending if p[0] != call_id]
        return
    # Answer the earliest open call of the same name (or simply the earliest open call).
    match = next((p for p in pending if p[1] == name), pending[0] if pending else None)
    if match is not None:
        out["tool_call_id"] = match[0]
        pending.remove(match)


def _images(raw: Any, where: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(img, str) for img in raw):
        raise BadRequest(f"{where} must be a list of base64 strings", param=where)
    return [_data_url(img, f"{where}[{n}]") for n, img in enumerate(raw)]


def _data_url(b64: str, where: str) -> str:
    compact = "".join(b64.split())
    try:
        head = base64.b64decode(compact, validate=True)[:12]
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where} is not valid base64", param=where) from None
    mime = next((m for magic, m in _IMAGE_MAGIC if head.startswith(magic)), None)
    if mime is None and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        mime = "image/webp"
    if mime is None:
        raise BadRequest(f"{where} is not a PNG, JPEG, GIF or WebP image", param=where)
    return f"data:{mime};base64,{compact}"


def _user_content(text: str, image_urls: list[str]) -> str | list[dict[str, Any]]:
    if not image_urls:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    return parts


__all__ = [
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "EMBEDDINGS_PATH",
    "LoadKind",
    "chat_request",
    "embed_dimensions",
    "embed_request",
    "generate_request",
    "is_load_request",
    "load_response",
]
