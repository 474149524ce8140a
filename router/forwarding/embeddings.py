"""OpenAI `/v1/embeddings` `dimensions` for backends that ignore it (llama-server, KoboldCpp):
the answer's vectors are cut to the first N values and renormalised to unit length, as Ollama
does for `/api/embed` and as a Matryoshka model's shorter vectors are meant to be used.
A vector asked for with `encoding_format: "base64"` (the `openai` Python client's default) is
cut the same way: decoded from little-endian float32, cut, renormalised and encoded again.
vLLM applies `dimensions` itself and gets the request as sent.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from dataclasses import dataclass
from typing import Any

from router.errors import BadGateway, BadRequest
from router.forwarding.reply import Reply, Rewrite, _WholeRewrite
from router.forwarding.rewrite import ModelRewriter


def dimensions_of(body: Any) -> int | None:
    """A request's `dimensions`: a positive integer, or None when absent."""
    dims = body.get("dimensions") if isinstance(body, dict) else None
    if dims is None:
        return None
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise BadRequest("dimensions must be a positive integer", param="dimensions")
    return dims


def truncate(vec: list[float], dimensions: int) -> list[float]:
    """Keep the first `dimensions` values, then back to unit length."""
    head = vec[:dimensions]
    norm = math.sqrt(sum(x * x for x in head))
    return [x / norm for x in head] if norm else head


def truncate_base64(encoded: str, dimensions: int) -> str:
    """`truncate` for a base64 vector: OpenAI's encoding is packed little-endian float32."""
    raw = base64.b64decode(encoded, validate=True)
    if len(raw) % 4:
        raise ValueError("a base64 embedding is not a whole number of float32 values")
    vec = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    head = truncate(vec, dimensions)
    return base64.b64encode(struct.pack(f"<{len(head)}f", *head)).decode("ascii")


@dataclass(frozen=True)
class EmbeddingDimensions:
    """The `Rewrite` translation, with each vector of a successful JSON answer truncated."""

    rewriter: ModelRewriter
    dimensions: int

    def reply(self, status: int, content_type: str, length: int | None) -> Reply:
        plain = Rewrite(self.rewriter).reply(status, content_type, length)
        if status >= 400 or "json" not in content_type.lower():
            return plain
        body = _Truncated(self.rewriter, self.dimensions)
        return Reply(status, body, plain.fail, content_type=plain.content_type, whole=True)


class _Truncated(_WholeRewrite):
    def __init__(self, rewriter: ModelRewriter, dimensions: int) -> None:
        super().__init__(rewriter)
        self._dimensions = dimensions

    def flush(self) -> bytes:
        try:
            answer = json.loads(super().flush())
            for item in answer["data"]:
                vec = item["embedding"]
                if isinstance(vec, str):
                    item["embedding"] = truncate_base64(vec, self._dimensions)
                else:
                    item["embedding"] = truncate(vec, self._dimensions)
        except (ValueError, KeyError, TypeError, RecursionError, struct.error):
            raise BadGateway("the backend's embeddings answer is not the OpenAI shape") from None
        return json.dumps(answer).encode()
