"""`/router/v1/site/offload/settings`: the lending settings, layered default < config file <
value saved from the WebUI (docs/lending.md). A save is validated whole, stored, put in force
at once (read per decision: no restart) and pushed to every slave, all by
`Lending.save_settings`; the pure half is router/lending/settings.py.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from router.appkeys import LENDING, SETTINGS
from router.edge import Handler, read_json, refuse_addresses
from router.errors import BadRequest, NotFound
from router.lending import listing


async def _batch(request: web.Request) -> Any:
    body = await read_json(request, required=True)
    refuse_addresses(request, body)
    extra = sorted(set(body) - {"settings"})
    if extra:
        raise BadRequest(
            f'unknown field {extra[0][:64]!r}; send {{"settings": {{...}}}}', param=extra[0][:64]
        )
    if "settings" not in body:
        raise BadRequest('"settings" is required', param="settings")
    return body["settings"]


async def offload_settings(request: web.Request) -> web.StreamResponse:
    refuse_addresses(request)
    app = request.app
    layers = app[LENDING].saved_layers()
    if request.method in ("GET", "HEAD"):
        return web.json_response(listing(layers.config, layers.saved, layers.values))
    if app[SETTINGS].cluster.role == "slave":
        raise NotFound("a slave's lending settings are pushed by its master; save them there")
    batch = await _batch(request) if request.method == "POST" else None
    layers = await app[LENDING].save_settings(batch)
    return web.json_response(listing(layers.config, layers.saved, layers.values))


HANDLERS: dict[str, Handler] = {"site.offload_settings": offload_settings}
