"""Backend WebUI site routes and the management listener's open route (docs/webuis.md).

- `GET /router/v1/site/webuis`: the catalog, one entry per kind this node can offer.
- `POST /router/v1/site/webuis/session {"id","enabled"}`: enable or disable a kind (memory
  only; enabling starts nothing).
- `POST /router/v1/site/webuis/load {"id","model_id"|"image_id"}`: an ordinary explicit load
  of a compatible model.
- `GET /router/webuis/<kind>/...` (admin): 302 to the backend-UI listener with a single-use
  ticket; the page itself is served there (router/api/admin/webui_proxy.py), on another origin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from yarl import URL

from router.appkeys import CATALOG, RUNTIMES, SETTINGS, WEBUIS
from router.config import ModelConfig
from router.domain import Lane
from router.edge import Handler, addressed_node, match_of, read_json, split_host
from router.errors import BadRequest, Conflict, NotFound, ServiceUnavailable
from router.webuis import (
    BY_ID,
    TICKET_PARAM,
    Kind,
    Node,
    WebUIs,
    catalog,
    compatible,
    lane_for,
    listed,
    prefix_of,
)


async def webuis_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    app[WEBUIS] = WebUIs(require_ticket=settings.security.profile == "secure")
    yield


def _node(request: web.Request) -> Node:
    settings = request.app[SETTINGS]
    return Node(settings.cluster.node_id, settings.cluster.public_url)


async def _list(request: web.Request) -> web.Response:
    addressed_node(request)
    data = catalog(
        request.app[CATALOG].configs(),
        request.app[RUNTIMES].views(),
        request.app[WEBUIS].enabled,
        _node(request),
    )
    return web.json_response({"object": "list", "data": data})


def _kind(body: dict[str, Any], configs: list[ModelConfig]) -> Kind:
    value = body.get("id")
    if not isinstance(value, str) or not value:
        raise BadRequest('"id" must be a WebUI id, such as "llama"', param="id")
    kind = BY_ID.get(value)
    if kind is None:
        raise NotFound(f"unknown WebUI {value[:64]!r}; known: {', '.join(BY_ID)}", param="id")
    if kind not in listed(configs):
        raise NotFound(f"no configuration on this node is compatible with {kind.id}", param="id")
    return kind


async def _session(request: web.Request) -> web.Response:
    body = await read_json(request, required=True)
    addressed_node(request)
    kind = _kind(body, request.app[CATALOG].configs())
    enabled = body.get("enabled")
    if not isinstance(enabled, bool):
        raise BadRequest('"enabled" must be true or false', param="enabled")
    kinds = request.app[WEBUIS].enabled
    if enabled:
        kinds.add(kind.id)
    else:
        kinds.discard(kind.id)
    return web.json_response({"ok": True, "id": kind.id, "enabled": enabled})


def _chosen(kind: Kind, body: dict[str, Any], configs: list[ModelConfig]) -> ModelConfig:
    """The compatible config named by `model_id` or `image_id`, or the only one there is."""
    candidates = compatible(kind, configs)
    for param in ("model_id", "image_id"):
        value = body.get(param)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise BadRequest(f'"{param}" must be a string', param=param)
        found = next((c for c in candidates if value in (c.id, c.image_id)), None)
        if found is None:
            raise Conflict(
                f"{value[:64]!r} is not a model compatible with {kind.id}; compatible: "
                + ", ".join(c.id for c in candidates),
                param=param,
            )
        return found
    if len(candidates) != 1:
        names = ", ".join(c.id for c in candidates)
        raise BadRequest(f'name a model with "model_id"; compatible: {names}', param="model_id")
    return candidates[0]


async def _load(request: web.Request) -> web.Response:
    body = await read_json(request, required=True)
    addressed_node(request)
    configs = request.app[CATALOG].configs()
    kind = _kind(body, configs)
    config = _chosen(kind, body, configs)
    lane = lane_for(kind, config)
    assert lane is not None  # compatible() chose it for this lane
    await request.app[RUNTIMES].load(config, lane)
    return web.json_response(
        {
            "ok": True,
            "id": kind.id,
            "url": prefix_of(kind),
            "model_id": config.id,
            "image_id": config.image_id if lane is Lane.IMAGE else None,
        }
    )


async def open_webui(request: web.Request) -> web.StreamResponse:
    """Admin navigation to a backend UI: 302 to the backend-UI origin with a fresh ticket."""
    params = match_of(request).params
    kind = BY_ID.get(params.get("kind", ""))
    if kind is None:
        raise NotFound(f"unknown WebUI {params.get('kind', '')[:64]!r}; known: {', '.join(BY_ID)}")
    state = request.app[WEBUIS]
    if kind.id not in state.enabled:
        raise NotFound("webui is not enabled (POST /router/v1/site/webuis/session)")
    if state.listener is None:
        raise ServiceUnavailable("the backend-UI listener is off (server.backend_ui_bind)")
    host = split_host(request.headers.get("Host", ""))
    origin = state.listener.origin(host[0] if host else None, request.app[SETTINGS].server.host)
    tail = params.get("tail", "")
    query = [(k, v) for k, v in request.query.items() if k != TICKET_PARAM]
    query.append((TICKET_PARAM, state.tickets.issue(kind.id)))
    target = URL(origin).with_path(prefix_of(kind) + tail).with_query(query)
    return web.Response(status=302, headers={"Location": str(target), "Cache-Control": "no-store"})


HANDLERS: dict[str, Handler] = {
    "site.webuis_list": _list,
    "site.webuis_session": _session,
    "site.webuis_load": _load,
    "webuis.open": open_webui,
}
