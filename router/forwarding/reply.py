"""How a backend's answer becomes the client's: decided once its status and type are known.

`Proxy.forward` reads the backend and writes the client; a `Translation` says what goes in
between. The default (`Rewrite`) passes the answer through with model IDs rewritten; the Ollama
surface translates OpenAI answers to its own (router/ollama/translation.py). Either way the
proxy keeps the guarantees: connect retry, the client-stall deadline, 499 on abort, and a
terminal error in the stream's own format when the backend fails mid-answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from router.edge import is_streaming
from router.forwarding.rewrite import ModelRewriter
from router.forwarding.sse import encode_event

WHOLE_BODY_MAX = 256 * 1024
MAX_WHOLE_READ = 64 * 1024 * 1024  # a body held in memory to be rewritten or translated


class BodyTransform(Protocol):
    """The backend's bytes in, the client's bytes out, chunk by chunk (StreamRewriter's shape)."""

    def feed(self, chunk: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


@dataclass(frozen=True)
class Reply:
    """What the client gets for one backend answer."""

    status: int
    body: BodyTransform
    # The last bytes of a stream the backend cut: an error in the stream's own format; b"" when
    # the stream already ended; None when the format cannot say so (the connection is cut).
    fail: Callable[[str], bytes | None]
    content_type: str | None = None  # None keeps the backend's
    streaming: bool = False  # events: tell buffering hops to pass them at once
    # Read the backend's body in full, then answer in one write: small bodies (one syscall),
    # and bodies that can only be rewritten or translated whole. May raise a RouterError.
    whole: bool = False
    same_length: bool = False  # the body passes unchanged, so the backend's length holds


class Translation(Protocol):
    def reply(self, status: int, content_type: str, length: int | None) -> Reply: ...


class _Identity:
    def feed(self, chunk: bytes) -> bytes:
        return chunk

    def flush(self) -> bytes:
        return b""


class _WholeRewrite:
    """A JSON body held in full, its model ID rewritten at the end."""

    def __init__(self, rewriter: ModelRewriter) -> None:
        self._rewriter = rewriter
        self._parts: list[bytes] = []

    def feed(self, chunk: bytes) -> bytes:
        self._parts.append(chunk)
        return b""

    def flush(self) -> bytes:
        body, self._parts = b"".join(self._parts), []
        return self._rewriter.response_body(body)


@dataclass(frozen=True)
class Rewrite:
    """The default translation: the backend's own answer, public model IDs in place of local."""

    rewriter: ModelRewriter

    def reply(self, status: int, content_type: str, length: int | None) -> Reply:
        streaming = is_streaming(content_type)
        json_body = "json" in content_type.lower()
        whole = not streaming and self._read_whole(length, json_body)
        body: BodyTransform
        if whole:
            body = _WholeRewrite(self.rewriter) if json_body else _Identity()
        else:
            body = self.rewriter.stream()
        return Reply(
            status,
            body,
            partial(terminal_error_event, content_type),
            streaming=streaming,
            whole=whole,
            same_length=self.rewriter.identity,
        )

    def _read_whole(self, length: int | None, json_body: bool) -> bool:
        if length is not None and length <= WHOLE_BODY_MAX:
            return True
        rewritten = not self.rewriter.identity and json_body
        return rewritten and (length is None or length <= MAX_WHOLE_READ)


def terminal_error_event(content_type: str, message: str) -> bytes | None:
    """The error event that ends a cut SSE or NDJSON stream; None for other bodies."""
    kind = content_type.split(";", 1)[0].strip().lower()
    error = {"message": message, "type": "upstream_error", "code": 502}
    if kind == "text/event-stream":
        return encode_event({"error": error}, "error")
    if kind in ("application/x-ndjson", "application/jsonl"):
        return encode_line({"error": message})  # as Ollama ends a stream
    return None


def encode_line(record: object) -> bytes:
    # "replace": a JSON escape from the backend can decode to a lone surrogate.
    return json.dumps(record, ensure_ascii=False).encode("utf-8", "replace") + b"\n"
