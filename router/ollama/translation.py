"""The backend's OpenAI answer -> Ollama's, as a `Translation` for the proxy (the one
forwarding path: router/forwarding/reply.py).

A streamed answer becomes NDJSON record by record (`NdjsonStream`); an answer in one piece is
held whole and translated at the end; a refusal keeps its 4xx (a 5xx becomes 502) and its
message, in Ollama's `{"error": ...}`. Pure: the proxy does the I/O.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from router.edge import is_streaming
from router.errors import BadGateway, BadRequest, RouterError, sanitize
from router.forwarding import Reply
from router.ollama.requests import LoadKind
from router.ollama.responses import (
    chat_response,
    embed_response,
    generate_response,
    legacy_embedding_response,
)
from router.ollama.stream import NdjsonStream

NDJSON = "application/x-ndjson"
JSON = "application/json"


@dataclass(frozen=True)
class OllamaTranslation:
    """One translated request's answer: what Ollama operation it was, and its clock."""

    op: LoadKind
    public_model: str
    started_ns: int
    load_ns: int = 0
    dimensions: int | None = None  # /api/embed's truncation, applied to the answer
    clock: Callable[[], int] = field(default=time.time_ns, compare=False)

    def reply(self, status: int, content_type: str, length: int | None) -> Reply:
        if status >= 400:
            return Reply(
                status if status < 500 else 502,
                _Whole(lambda raw: _refusal(status, raw)),
                _unframed,
                content_type=JSON,
                whole=True,
            )
        if self.op in ("chat", "generate") and is_streaming(content_type):
            stream = NdjsonStream(
                "chat" if self.op == "chat" else "generate",
                self.public_model,
                self.started_ns,
                load_ns=self.load_ns,
                clock=self.clock,
            )
            return Reply(200, stream, stream.fail, content_type=NDJSON, streaming=True)
        return Reply(200, _Whole(self._answer), _unframed, content_type=JSON, whole=True)

    def _answer(self, raw: bytes) -> bytes:
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):
            raise BadGateway("the backend's answer is not JSON") from None
        return json.dumps(self.translate(answer)).encode()

    def translate(self, answer: Any) -> dict[str, Any]:
        """An OpenAI answer in one piece -> the Ollama answer (BadGateway if it cannot be)."""
        now, public, started = self.clock(), self.public_model, self.started_ns
        if self.op == "chat":
            return chat_response(answer, public, started, now, load_ns=self.load_ns)
        if self.op == "generate":
            return generate_response(answer, public, started, now, load_ns=self.load_ns)
        if self.op == "embeddings":
            return legacy_embedding_response(answer, dimensions=self.dimensions)
        return embed_response(
            answer,
            public,
            dimensions=self.dimensions,
            started_ns=started,
            now_ns=now,
            load_ns=self.load_ns,
        )


class _Whole:
    """The whole body held, then translated in one go; a RouterError raised at the end becomes
    the answer (nothing has been sent yet: Reply.whole)."""

    def __init__(self, translate: Callable[[bytes], bytes]) -> None:
        self._translate = translate
        self._parts: list[bytes] = []

    def feed(self, chunk: bytes) -> bytes:
        self._parts.append(chunk)
        return b""

    def flush(self) -> bytes:
        raw, self._parts = b"".join(self._parts), []
        return self._translate(raw)


def _unframed(_message: str) -> None:
    return None  # a JSON object cannot carry a late error: the connection is cut


def _refusal(status: int, raw: bytes) -> bytes:
    raise backend_error(status, raw)


def backend_error(status: int, raw: bytes) -> RouterError:
    """The backend's own message, in Ollama's shape, with its status kept when it is a 4xx."""
    try:
        payload = json.loads(raw)
        message = payload.get("error", payload)
        if isinstance(message, dict):
            message = message.get("message", json.dumps(message))
    except (ValueError, AttributeError, RecursionError):
        message = raw.decode("utf-8", "replace")
    error: RouterError = (
        BadRequest(sanitize(str(message)))
        if 400 <= status < 500
        else BadGateway(f"the backend answered {status}: {sanitize(str(message))}")
    )
    error.status = status if status < 500 else 502
    return error
