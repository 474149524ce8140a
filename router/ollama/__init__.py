"""Ollama <-> OpenAI translation: request bodies (`requests`), response bodies (`responses`),
the SSE -> NDJSON stream (`stream`) and the proxy's `Translation` that applies them to a
backend's answer (`translation`). Pure: no I/O; the handlers are in
router/api/inference/ollama*.py.
"""

from __future__ import annotations

from router.ollama.keep_alive import FOREVER, parse_keep_alive
from router.ollama.requests import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    LoadKind,
    canonical_name,
    chat_request,
    embed_dimensions,
    embed_request,
    generate_request,
    is_load_request,
    load_response,
)
from router.ollama.responses import (
    chat_response,
    embed_response,
    generate_response,
    legacy_embedding_response,
)
from router.ollama.stream import NdjsonStream
from router.ollama.translation import OllamaTranslation, backend_error

__all__ = [
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "EMBEDDINGS_PATH",
    "FOREVER",
    "LoadKind",
    "NdjsonStream",
    "OllamaTranslation",
    "backend_error",
    "canonical_name",
    "chat_request",
    "chat_response",
    "embed_dimensions",
    "embed_request",
    "embed_response",
    "generate_request",
    "generate_response",
    "is_load_request",
    "legacy_embedding_response",
    "load_response",
    "parse_keep_alive",
]
