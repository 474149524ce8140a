"""Public <-> local model IDs in JSON, SSE and NDJSON bodies.

Bodies are rewritten as bytes, never decoded and re-encoded: random-weight models (and real
ones, mid-codepoint) emit invalid UTF-8 that must reach the client untouched, and re-serialising
JSON would change every byte of formatting. Only the `"model": "<id>"` value is replaced.
When the backend already uses the public ID (llama-server `--alias`, vLLM
`--served-model-name`), the rewriter is the identity and costs nothing.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field


def _model_value(model_id: str) -> bytes:
    """The regex of one `"model"` value (the JSON string literal, quotes included)."""
    if model_id.endswith("*"):  # a family-wide name such as KoboldCpp's "koboldcpp/<name>"
        prefix = json.dumps(model_id[:-1]).encode()[:-1]  # opening quote, no closing one
        return re.escape(prefix) + rb'(?:[^"\\]|\\.)*"'
    return re.escape(json.dumps(model_id).encode())


# A rewriter is made per request, for one of a handful of model names: each pattern is built
# once (bounded; the names come from the configuration and the backends' answers).
@functools.lru_cache(maxsize=256)
def _model_value_pattern(*model_ids: str) -> re.Pattern[bytes]:
    values = b"|".join(_model_value(m) for m in model_ids)
    return re.compile(rb'("model"\s*:\s*)(?:' + values + rb")")


@functools.lru_cache(maxsize=256)
def _replacement(model_id: str) -> bytes:
    """The `re.sub` template that puts `model_id` as the value after the matched key."""
    return rb"\g<1>" + json.dumps(model_id).encode().replace(b"\\", b"\\\\")


@dataclass
class ModelRewriter:
    public: str
    local: str
    # More names the backend may answer with, rewritten to `public` in answers only: the model
    # file's absolute path llama-server puts in its native /completion answer.
    also: tuple[str, ...] = ()
    _to_public: re.Pattern[bytes] | None = field(init=False, default=None)
    _to_local: re.Pattern[bytes] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        answered = [n for n in (self.local, *self.also) if n != self.public]
        if answered:
            self._to_public = _model_value_pattern(*answered)
        if self.public != self.local:
            # A wildcard local name is what the backend says, not what it needs to be told.
            if not self.local.endswith("*"):
                self._to_local = _model_value_pattern(self.public)

    @property
    def identity(self) -> bool:
        return self._to_public is None

    def request_body(self, body: bytes) -> bytes:
        if self._to_local is None:
            return body
        return self._to_local.sub(_replacement(self.local), body)

    def response_body(self, body: bytes) -> bytes:
        if self._to_public is None:
            return body
        return self._to_public.sub(_replacement(self.public), body)

    def stream(self) -> StreamRewriter:
        return StreamRewriter(self)


class StreamRewriter:
    """Rewrites a line-framed stream (SSE or NDJSON) chunk by chunk.

    Complete lines go out with the chunk that completed them, so events the backend sent
    separately are never merged; only a trailing partial line waits for its end.
    """

    def __init__(self, rewriter: ModelRewriter) -> None:
        self._rewriter = rewriter
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        if self._rewriter.identity:
            return chunk
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:]
        return self._rewriter.response_body(data[:cut])

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return self._rewriter.response_body(rest) if rest else b""
