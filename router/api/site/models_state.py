"""`/router/v1/site/models/state` (admin): which models are switched off, and the switch. The
body's `node_id` names the node (its row declares `names_node`); a master's dispatcher relays
a call for another node before this runs."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from router.appkeys import CATALOG, RUNTIMES
from router.edge import Handler, addressed_node, read_json
from router.errors import BadRequest, ModelNotFound


async def models_state(request: web.Request) -> web.StreamResponse:
    catalog = request.app[CATALOG]
    return web.json_response({"disabled": sorted(catalog.disabled_ids())})


async def models_state_set(request: web.Request) -> web.StreamResponse:
    """`{"node_id", "local_id", "enabled"}` (the WebUI's shape; `model` and `disabled` are
    accepted too). Disabling also unloads the model once its running requests finish."""
    body = await read_json(request, required=True)
    node_id = addressed_node(request)
    field = "local_id" if body.get("local_id") is not None else "model"
    model_id = _optional_str(body, field)
    if not model_id:
        raise BadRequest('send {"local_id": "<model id>", "enabled": true|false}', param=field)
    disabled = _disabled_flag(body)
    catalog = request.app[CATALOG]
    config = next((c for c in catalog.all_configs() if model_id in (c.id, c.image_id)), None)
    if config is None:
        raise ModelNotFound(model_id)
    await catalog.set_disabled(model_id, disabled)
    if disabled and model_id == config.id:
        runtimes = request.app[RUNTIMES]
        lanes = frozenset(
            lane for v in runtimes.views() if v.config.id == config.id for lane in v.occupies
        )
        if lanes:
            await runtimes.unload(lanes)
    return web.json_response({"node_id": node_id, "local_id": model_id, "enabled": not disabled})


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{name} must be a string", param=name)
    return value


def _disabled_flag(body: dict[str, Any]) -> bool:
    for name, means_disabled in (("enabled", False), ("disabled", True)):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise BadRequest(f"{name} must be true or false", param=name)
        return value is means_disabled
    raise BadRequest('send {"local_id": "<model id>", "enabled": true|false}', param="enabled")


HANDLERS: dict[str, Handler] = {
    "site.models_state": models_state,
    "site.models_state_set": models_state_set,
}
