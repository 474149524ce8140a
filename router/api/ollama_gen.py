"""Ollama generation routes: `/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings`.

KoboldCpp speaks Ollama itself, so its requests are forwarded unchanged. For llama-server and
vLLM the router translates to their OpenAI routes and back (router/ollama/requests.py,
docs/ollama.md). Errors are always `{"error": "..."}` (the route's surface is Ollama).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
from aiohttp import web

from router import ollama as tr
from router.api import inference
from router.api.common import Handler, arrived, read_json_object, resolve_model, route_of
from router.appkeys import RECORDER, RUNTIMES, SESSION, SETTINGS
from router.config import ModelConfig
from router.domain import Family, Lane, MiB, family_for
from router.edge import mark_streaming
from router.errors import BadGateway, BadRequest, RouterError, sanitize
from router.forwarding import Selection
from router.records import RequestInfo
from router.runtime import Lease

NDJSON = "application/x-ndjson"


async def _read_body(request: web.Request) -> tuple[bytes, dict[str, Any]]:
    """Ollama clients send JSON with any content type; images make bodies large."""
    cap = int(request.app[SETTINGS].limits.workflow_media_mb * MiB)
    return await read_json_object(request, cap, "limits.workflow_media_mb")


def _lane(kind: str, config: ModelConfig) -> Lane:
    if kind not in ("embed", "embeddings"):
        return Lane.TEXT
    # An embedding config serves /api/embed; a text model on llama-server does not (DESIGN 4).
    if Lane.EMBEDDINGS in config.lanes:
        return Lane.EMBEDDINGS
    raise BadRequest(f"model {config.id!r} has no embedding component; name an embedding model")


async def _handle(request: web.Request, kind: str) -> web.StreamResponse:
    info = _info(request)
    status, error, t_in, t_out, upstream = 500, None, 0, 0, None
    try:
        raw, body = await _read_body(request)
        config = resolve_model(request, body.get("model"))
        lane = _lane(kind, config)
        info.model, info.lane = body["model"], lane.value
        if lane not in config.lanes:
            raise BadRequest(f"model {config.id!r} has no {lane} component")
        family = family_for(config.backend_mode, lane)
        info.family = family.value if family else None
        if family is Family.KOBOLD:
            return await inference.forward(request, Selection(body["model"], raw, True))
        response = await _translated(request, kind, body, config, lane, info)
        status = response.status
        return response
    except RouterError as exc:
        status, error = exc.status, exc.message
        raise
    except asyncio.CancelledError:
        status = 499
        raise
    finally:
        if info.family != Family.KOBOLD.value:  # the forwarded path records itself
            request.app[RECORDER].record(
                info, status=status, error_message=error, bytes_in=t_in, bytes_out=t_out,
                upstream_status=upstream,
            )  # fmt: skip


def _info(request: web.Request) -> RequestInfo:
    route = route_of(request)
    started = arrived(request)
    lane = route.lane.value if route.lane else None
    return RequestInfo(route.template, route.surface.value, lane, started, time.time())


async def _translated(
    request: web.Request, kind: str, body: dict[str, Any], config: ModelConfig, lane: Lane,
    info: RequestInfo,
) -> web.StreamResponse:  # fmt: skip
    started_ns = time.time_ns()
    public = body["model"]
    load_kind = "embed" if kind == "embeddings" else kind
    lease = await request.app[RUNTIMES].ensure(config, lane)
    info.queue_wait_ms = lease.queue_wait_ms
    load_ns = int(lease.queue_wait_ms * 1e6)
    try:
        if tr.is_load_request(load_kind, body):  # type: ignore[arg-type]
            return web.json_response(tr.load_response(load_kind, public, time.time_ns()))  # type: ignore[arg-type]
        local = lease.runtime.local_model_id or public
        path, oai = _request(kind, body, local)
        return await _exchange(request, lease, kind, body, path, oai, public, started_ns, load_ns)
    finally:
        lease.release()


def _request(kind: str, body: dict[str, Any], local: str) -> tuple[str, dict[str, Any]]:
    if kind == "chat":
        return tr.chat_request(body, local)
    if kind == "generate":
        return tr.generate_request(body, local)
    return tr.embed_request(body, local)


async def _exchange(
    request: web.Request, lease: Lease, kind: str, body: dict[str, Any], path: str,
    oai: dict[str, Any], public: str, started_ns: int, load_ns: int,
) -> web.StreamResponse:  # fmt: skip
    session = request.app[SESSION]
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=10, sock_read=request.app[SETTINGS].runtime.stream_idle_timeout
    )
    try:
        async with session.post(lease.base_url + path, json=oai, timeout=timeout) as resp:
            if resp.status >= 400:
                raise _backend_error(resp.status, await resp.read())
            if oai.get("stream"):
                return await _stream(request, resp, kind, public, started_ns, load_ns)
            answer = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise BadGateway(f"the backend failed: {exc or type(exc).__name__}") from exc
    return web.json_response(_final(kind, answer, body, public, started_ns, load_ns))


def _final(
    kind: str, answer: Any, body: dict[str, Any], public: str, started_ns: int, load_ns: int
) -> dict[str, Any]:
    now = time.time_ns()
    if kind == "chat":
        return tr.chat_response(answer, public, started_ns, now, load_ns=load_ns)
    if kind == "generate":
        return tr.generate_response(answer, public, started_ns, now, load_ns=load_ns)
    dims = tr.embed_dimensions(body)
    if kind == "embeddings":
        return tr.legacy_embedding_response(answer, dimensions=dims)
    return tr.embed_response(
        answer, public, dimensions=dims, started_ns=started_ns, now_ns=now, load_ns=load_ns
    )


async def _stream(
    request: web.Request, resp: aiohttp.ClientResponse, kind: str, public: str,
    started_ns: int, load_ns: int,
) -> web.StreamResponse:  # fmt: skip
    out = web.StreamResponse(status=200, headers={"Content-Type": NDJSON})
    mark_streaming(out.headers)  # type: ignore[arg-type]
    await out.prepare(request)
    records = tr.ollama_ndjson(
        resp.content.iter_any(),  # type: ignore[arg-type]
        "chat" if kind == "chat" else "generate",
        public,
        started_ns,
        load_ns=load_ns,
    )
    async for line in records:
        await out.write(line)
    await out.write_eof()
    return out


def _backend_error(status: int, raw: bytes) -> RouterError:
    """The backend's own message, in Ollama's shape, with its status kept when it is a 4xx."""
    try:
        payload = json.loads(raw)
        message = payload.get("error", payload)
        if isinstance(message, dict):
            message = message.get("message", json.dumps(message))
    except (ValueError, AttributeError):
        message = raw.decode("utf-8", "replace")
    error: RouterError = (
        BadRequest(sanitize(str(message)))
        if 400 <= status < 500
        else BadGateway(f"the backend answered {status}: {sanitize(str(message))}")
    )
    error.status = status if status < 500 else 502
    return error


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
