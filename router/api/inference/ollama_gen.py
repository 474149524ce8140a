"""Ollama generation routes: `/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings`.

KoboldCpp speaks Ollama itself, so its requests are forwarded unchanged. For llama-server and
vLLM the body is translated to their OpenAI routes (router/ollama/requests.py) and forwarded
on the same path as every other request (`forward.forward`), with the answer translated back
by the proxy (router/ollama/translation.py, docs/ollama.md). Errors are always
`{"error": "..."}` (the route's surface is Ollama).
"""

from __future__ import annotations

import json
import time
from functools import partial
from typing import Any

from aiohttp import web

from router import ollama as tr
from router.api.inference import forward as forwarder
from router.api.node import remote_target
from router.appkeys import CATALOG, RAW_BODY, RUNTIMES, SETTINGS
from router.config import ModelConfig
from router.domain import Family, Lane, MiB, family_for
from router.edge import Handler, read_json, upstream_request_headers
from router.errors import BadRequest
from router.forwarding import Selection
from router.runtime import Lease

# Headers the router sets itself on a translated request: the body is new JSON, and the
# answer must come back uncompressed to be translated.
_REPLACED = ("x-tensors-model", "content-type", "accept", "accept-encoding")
_PATH_OF: dict[tr.LoadKind, str] = {
    "chat": tr.CHAT_PATH,
    "generate": tr.CHAT_PATH,
    "embed": tr.EMBEDDINGS_PATH,
    "embeddings": tr.EMBEDDINGS_PATH,
}


async def _read_body(request: web.Request) -> tuple[bytes, dict[str, Any]]:
    """Ollama clients send JSON with any content type; images make bodies large."""
    cap = int(request.app[SETTINGS].limits.workflow_media_mb * MiB)
    body = await read_json(request, cap, setting="limits.workflow_media_mb", types=None)
    return request[RAW_BODY], body


def _lane(op: tr.LoadKind, config: ModelConfig) -> Lane:
    if op not in ("embed", "embeddings"):
        lane = Lane.TEXT
    elif Lane.EMBEDDINGS in config.lanes:
        # An embedding config serves /api/embed; a text model on llama-server does not.
        lane = Lane.EMBEDDINGS
    else:
        raise BadRequest(f"model {config.id!r} has no embedding component; name an embedding model")
    if lane not in config.lanes:
        raise BadRequest(f"model {config.id!r} has no {lane} component")
    return lane


async def _handle(request: web.Request, op: tr.LoadKind) -> web.StreamResponse:
    started_ns = time.time_ns()
    return await forwarder.forward(request, partial(_override, request, op, started_ns))


async def _override(request: web.Request, op: tr.LoadKind, started_ns: int) -> forwarder.Override:
    """What to forward: the body as it is to KoboldCpp, else its OpenAI translation."""
    raw, body = await _read_body(request)
    name = body.get("model")
    if isinstance(name, str) and name:
        name = tr.canonical_name(name)
        # Served by another cluster node as sent: that node translates it for its backend.
        target = remote_target(request, Selection(name, raw, True, "json:model"))
        if target is not None:
            return forwarder.Override(Selection(name, raw, True, "json:model"), relay_to=target)
    config = request.app[CATALOG].require(name)
    public: str = body["model"] if name is None else name  # the ID the router selects by
    sent: str = body["model"]  # answers name the model as it was sent (Ollama does)
    lane = _lane(op, config)
    keep_alive = tr.parse_keep_alive(body.get("keep_alive"))
    path = _PATH_OF[op]
    if tr.is_load_request(op, body):
        return _load_or_unload(request, op, public, sent, path, keep_alive)
    if op in ("chat", "generate") and family_for(config.backend_mode, lane) is Family.KOBOLD:
        # KoboldCpp answers /api/chat and /api/generate itself (not /api/embed: translated).
        selection = Selection(public, raw, True, "json:model")
        return forwarder.Override(selection, keep_alive=keep_alive)
    path, oai = _request(op, body, public)  # the rewriter puts in the backend's own model ID
    dimensions = tr.embed_dimensions(body) if op in ("embed", "embeddings") else None

    def translation(lease: Lease) -> tr.OllamaTranslation:
        load_ns = int(lease.queue_wait_ms * 1e6)
        return tr.OllamaTranslation(op, sent, started_ns, load_ns, dimensions)

    headers = upstream_request_headers(request.headers, extra_drop=_REPLACED)
    headers["Content-Type"] = "application/json"
    selection = Selection(public, json.dumps(oai).encode(), True, "json:model")
    return forwarder.Override(
        selection, path, headers, translation=translation, keep_alive=keep_alive
    )


def _load_or_unload(
    request: web.Request,
    op: tr.LoadKind,
    public: str,
    sent: str,
    path: str,
    keep_alive: float | None,
) -> forwarder.Override:
    """Nothing to generate: Ollama's load request, or with `keep_alive: 0` its unload request,
    which stops the model if it runs (after its running work) and never loads it."""
    selection = Selection(public, b"", True)
    if keep_alive == 0:

        async def unload(config: ModelConfig, lane: Lane) -> web.StreamResponse:
            await request.app[RUNTIMES].expire(config, lane)
            return web.json_response(tr.load_response(op, sent, time.time_ns(), "unload"))

        return forwarder.Override(selection, path, unleased=unload)

    def loaded(_: Lease) -> web.StreamResponse:
        return web.json_response(tr.load_response(op, sent, time.time_ns()))

    return forwarder.Override(selection, path, answer=loaded, keep_alive=keep_alive)


def _request(op: tr.LoadKind, body: dict[str, Any], model: str) -> tuple[str, dict[str, Any]]:
    if op == "chat":
        return tr.chat_request(body, model)
    if op == "generate":
        return tr.generate_request(body, model)
    return tr.embed_request(body, model)


async def chat(request: web.Request) -> web.StreamResponse:
    return await _handle(request, "chat")


async def generate(request: web.Request) -> web.StreamResponse:
    return await _handle(request, "generate")


async def embed(request: web.Request) -> web.StreamResponse:
    return await _handle(request, "embed")


async def embeddings(request: web.Request) -> web.StreamResponse:
    return await _handle(request, "embeddings")


HANDLERS: dict[str, Handler] = {
    "ollama.chat": chat,
    "ollama.generate": generate,
    "ollama.embed": embed,
    "ollama.embeddings": embeddings,
}
