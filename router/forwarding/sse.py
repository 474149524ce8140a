"""Server-sent events, both ways: the one encoder the router writes events with, and the
incremental parser that reads a backend's event stream (Ollama translation)."""

from __future__ import annotations

import json
from typing import Any

Event = tuple[str, bytes]  # (event name, data)


def encode_event(data: Any, event: str | None = None, *, event_id: str | None = None) -> bytes:
    """One event; values JSON cannot carry (datetimes, paths) are written as text. `event_id`
    lets a client reconnect with Last-Event-ID."""
    head = (f"id: {event_id}\n" if event_id else "") + (f"event: {event}\n" if event else "")
    return f"{head}data: {json.dumps(data, default=str)}\n\n".encode()


class SSEParser:
    """Incremental server-sent-events framing (only `event:`, `data:` and llama-server's
    nonstandard `error:` field matter here)."""

    def __init__(self) -> None:
        self._buf = b""
        self._name = ""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[Event]:
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        events: list[Event] = []
        for line in lines:
            self._line(line.removesuffix(b"\r"), events)
        return events

    def close(self) -> list[Event]:
        """End of input: complete lines still form an event without their blank line; an
        unterminated last line is a cut, not data, and is dropped."""
        events: list[Event] = []
        self._buf = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[Event]) -> None:
        if not line:
            if self._data:
                events.append((self._name, b"\n".join(self._data)))
            self._name, self._data = "", []
            return
        if line.startswith(b":"):
            return
        field, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if field == b"event":
            self._name = value.decode("utf-8", "replace")
        elif field == b"data":
            self._data.append(value)
        elif field == b"error":  # llama-server writes `error: {json}` mid-stream
            self._name = "error"
            self._data.append(value)
