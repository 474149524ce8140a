"""How a streamed answer ended, read from its last bytes: a backend may end a stream it had
started with 200 by an error event instead of the answer's end (llama-server's
`data: {"error": {... "Context size has been exceeded." ...}}`, or the Ollama translation's
closing `{"error": ...}` record). The client sees that error; the analytics must too, so the
proxy records such a stream as failed with the backend's message (router/forwarding/proxy.py).

Pure: bytes in, the message (or None) out.
"""

from __future__ import annotations

import json
from typing import Any

from router.forwarding.sse import SSEParser

NDJSON_TYPES = ("application/x-ndjson", "application/jsonl")


def stream_error(content_type: str, tail: bytes) -> str | None:
    """The error message a stream's last event (SSE) or record (NDJSON) carries, else None.

    Only the last one counts: an error earlier in the stream that the backend recovered from,
    or the word "error" in the answer's text, is not the stream's end."""
    if b"error" not in tail:  # the common case, a finished answer, in one scan
        return None
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "text/event-stream":
        return _last_sse_error(tail)
    if kind in NDJSON_TYPES:
        return _last_ndjson_error(tail)
    return None


def error_message(obj: Any, text: str) -> str:
    """The message of an error event: `{"error": {"message": ...}}`, `{"error": "..."}`,
    llama-server's `error: {"message": ...}` field, or the event's own text when not JSON."""
    err = obj.get("error", obj) if isinstance(obj, dict) else obj
    if err is None:
        err = text
    if isinstance(err, dict):
        err = err.get("message") or json.dumps(err)
    message = err if isinstance(err, str) else json.dumps(err)
    return message or "the backend reported an error"


def _last_sse_error(tail: bytes) -> str | None:
    parser = SSEParser()
    events = parser.feed(tail) + parser.close()
    # OpenAI's end marker may follow the error event; what precedes it is the stream's end.
    while events and events[-1][1].strip() == b"[DONE]":
        events.pop()
    if not events:
        return None
    name, data = events[-1]
    return _error_of(data, always=name == "error")


def _last_ndjson_error(tail: bytes) -> str | None:
    lines = [line for line in tail.split(b"\n") if line.strip()]
    return _error_of(lines[-1], always=False) if lines else None


def _error_of(data: bytes, *, always: bool) -> str | None:
    text = data.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        obj = None
    if always or (isinstance(obj, dict) and obj.get("error") not in (None, "", {})):
        return error_message(obj, text)
    return None


__all__ = ["error_message", "stream_error"]
