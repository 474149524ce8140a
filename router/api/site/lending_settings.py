"""`/router/v1/site/offload/settings`: the lending settings, layered default < config file <
value saved from the WebUI (docs/lending.md). A save is validated whole, stored, put in force
at once (`app[LENDING].values`, read per decision: no restart) and pushed to every slave.
The pure half is router/lending/settings.py.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from router.appkeys import SETTINGS, STORE
from router.edge import Handler, read_json, refuse_addresses
from router.errors import BadRequest, InternalError, NotFound
from router.lending import (
    LENDING,
    LendingLayers,
    apply_batch,
    listing,
    resolve,
)

log = logging.getLogger(__name__)


def layers_of(app: web.Application) -> LendingLayers:
    layers = app[LENDING].layers
    if not isinstance(layers, LendingLayers):
        raise InternalError("the lending settings were not loaded with their layers")
    return layers


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
    layers = layers_of(app)
    if request.method in ("GET", "HEAD"):
        return web.json_response(listing(layers.config, layers.saved, layers.values))
    if app[SETTINGS].cluster.role == "slave":
        raise NotFound("a slave's lending settings are pushed by its master; save them there")
    batch = await _batch(request) if request.method == "POST" else None
    # One save at a time: validate against the saved layer, store, replace (no other save
    # can slip between the check and the write).
    async with layers.lock:
        saved: dict[str, Any]
        if batch is None:
            saved, values = {}, resolve(layers.config, {})
        else:
            retention = app[SETTINGS].analytics.raw_retention
            saved, values = apply_batch(batch, layers.saved, layers.config, retention)
        await app[STORE].lending.replace_saved(saved)
        layers.saved, layers.values = saved, values
        app[LENDING].settings_changed(values)
    # A shorter retention takes effect now rather than at the next hourly pass.
    await app[STORE].lending.prune_decisions(values.offload_decisions_retention)
    return web.json_response(listing(layers.config, layers.saved, layers.values))


HANDLERS: dict[str, Handler] = {"site.offload_settings": offload_settings}
