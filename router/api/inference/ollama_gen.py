"""Ollama generation routes: `/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings`.

KoboldCpp speaks Ollama itself, so its requests are forwarded unchanged. For llama-server and
vLLM the body is translated to their OpenAI routes (router/ollama/requests.py) and forwarded
on the same path as every other request (`forward.forward`), with the answer translated back
by the proxy (router/ollama/translation.py, docs/ollama.md). Errors are always
`{"error": "..."}` (the route's surface is Ollama).
"""

from __future__ import annotations

import dataclasses
import json
import time
from functools import partial
from typing import Any

from aiohttp import web

from router import inference as pipeline
from router import ollama as tr
from router.appkeys import CATALOG, RAW_BODY, RUNTIMES, SETTINGS
from router.config import ModelConfig
from router.domain import Family, Lane, MiB, family_for
from router.edge import Handler, read_json, upstream_request_headers
from router.errors import BadRequest
from router.forwarding import Selection
from router.forwarding.body_selector import check_model
from router.forwarding.selector import select_from_header, select_from_query
from router.inference import OnLease, Override, Serving, Upstream, local_embeddings
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
    return await pipeline.forward(request, partial(_override, request, op, started_ns))


async def _override(request: web.Request, op: tr.LoadKind, started_ns: int) -> Override:
    """What to forward: the body as it is to KoboldCpp, else its OpenAI translation."""
    raw, body = await _read_body(request)
    name, source = body.get("model"), "json:model"
    if op in ("embed", "embeddings"):
        # An embedding route: the contract's selectors (body, query, header) say whether the
        # request names a model at all.
        name, source = _embedding_selector(request, body)
        if name is None:
            # Selectorless embeddings, as on /v1/embeddings: placed like them (a master's
            # rotation), then served here by the same rule (docs/decisions.md).
            unnamed = partial(_here_unnamed, request, op, started_ns, body)
            return Override(Selection(None, raw, True), here=unnamed)
    if isinstance(name, str) and name:
        name = tr.canonical_name(name)
        here = partial(_here, request, op, started_ns, raw, body, name)
        # Another cluster node may serve it as sent: that node translates it for its backend.
        return Override(Selection(name, raw, True, source), here=here)
    return _here(request, op, started_ns, raw, body, name)


def _embedding_selector(request: web.Request, body: dict[str, Any]) -> tuple[str | None, str]:
    """The model an embedding request names, and where: `"model": null` or blank is none."""
    named = check_model(body.get("model"), '"model"')
    if named is not None:
        return named, "json:model"
    header = select_from_header(request.headers)
    if header is not None:
        return header, "header"
    query = select_from_query(request.query, ("model",))
    return (query[0], "query:model") if query is not None else (None, "")


def _here(
    request: web.Request,
    op: tr.LoadKind,
    started_ns: int,
    raw: bytes,
    body: dict[str, Any],
    name: object,
) -> Override:
    """Served on this node: the body as it is to KoboldCpp, else its OpenAI translation."""
    config = request.app[CATALOG].require(name)
    public: str = name if isinstance(name, str) else body["model"]  # the ID the router selects by
    # Answers name the model as it was sent (Ollama does); by a header or query: its ID.
    given = body.get("model")
    sent: str = given if isinstance(given, str) and given.strip() else public
    lane = _lane(op, config)
    keep_alive = tr.parse_keep_alive(body.get("keep_alive"))
    path = _PATH_OF[op]
    if tr.is_load_request(op, body):
        return _load_or_unload(request, op, public, sent, path, keep_alive)
    if op in ("chat", "generate") and family_for(config.backend_mode, lane) is Family.KOBOLD:
        # KoboldCpp answers /api/chat and /api/generate itself (not /api/embed: translated).
        selection = Selection(public, raw, True, "json:model")
        return Override(selection, serving=Serving(keep_alive=keep_alive))
    return _translated(request, op, started_ns, body, public, sent, keep_alive)


def _here_unnamed(
    request: web.Request, op: tr.LoadKind, started_ns: int, body: dict[str, Any]
) -> Override:
    """An embedding request without a model, served on this node: the runtime the selectorless
    rule picks (never a load), named in the answer as Ollama names a model."""
    config, lane = local_embeddings(request, tr.EMBEDDINGS_PATH, "POST")
    keep_alive = tr.parse_keep_alive(body.get("keep_alive"))
    if tr.is_load_request(op, body):
        if keep_alive == 0:  # an unload must say what to unload
            raise BadRequest('name the model to unload in "model"', param="model")
        override = _load_or_unload(request, op, config.id, config.id, tr.EMBEDDINGS_PATH, None)
    else:
        override = _translated(request, op, started_ns, body, config.id, config.id, keep_alive)
    serving = dataclasses.replace(override.serving, lane=lane)
    return dataclasses.replace(override, serving=serving)


def _translated(
    request: web.Request,
    op: tr.LoadKind,
    started_ns: int,
    body: dict[str, Any],
    public: str,
    sent: str,
    keep_alive: float | None,
) -> Override:
    """The OpenAI request for the backend, its answer translated back to Ollama's shape."""
    path, oai = _request(op, body, public)  # the rewriter puts in the backend's own model ID
    dimensions = tr.embed_dimensions(body) if op in ("embed", "embeddings") else None

    def translation(lease: Lease) -> tr.OllamaTranslation:
        load_ns = int(lease.queue_wait_ms * 1e6)
        return tr.OllamaTranslation(op, sent, started_ns, load_ns, dimensions)

    headers = upstream_request_headers(request.headers, extra_drop=_REPLACED)
    headers["Content-Type"] = "application/json"
    selection = Selection(public, json.dumps(oai).encode(), True, "json:model")
    return Override(
        selection,
        Upstream(path, headers),
        OnLease(translation=translation),
        serving=Serving(keep_alive=keep_alive),
    )


def _load_or_unload(
    request: web.Request,
    op: tr.LoadKind,
    public: str,
    sent: str,
    path: str,
    keep_alive: float | None,
) -> Override:
    """Nothing to generate: Ollama's load request, or with `keep_alive: 0` its unload request,
    which stops the model if it runs (after its running work) and never loads it."""
    selection = Selection(public, b"", True)
    if keep_alive == 0:

        async def unload(config: ModelConfig, lane: Lane) -> web.StreamResponse:
            await request.app[RUNTIMES].expire(config, lane)
            return web.json_response(tr.load_response(op, sent, time.time_ns(), "unload"))

        return Override(selection, Upstream(path), serving=Serving(unleased=unload))

    def loaded(_: Lease) -> web.StreamResponse:
        return web.json_response(tr.load_response(op, sent, time.time_ns()))

    return Override(
        selection, Upstream(path), OnLease(answer=loaded), serving=Serving(keep_alive=keep_alive)
    )


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
