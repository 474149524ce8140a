"""The node routes of the lending push (docs/lending.md), cluster token only:

- `POST /router/v1/node/offload/settings` `{"settings": {<every lending key>}}`: a slave puts
  its master's resolved values in force (`Lending.take_settings`); they win over its own file
  until it restarts, and it is pushed again each time it registers.
- `POST /router/v1/node/routing-links` `{"links": [...]}`: a slave replaces its link table
  (`Lending.take_links`: in memory, the master's store is the one copy that persists).
- `GET` on both: what is in force on this node.

The master's side of the push is the `Lending` service (router/lending/service.py:
`registered`, `links_changed`, `settings_changed`) with the sender, router/lending/push.py.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from router.appkeys import LENDING, SETTINGS
from router.config import LendingSettings
from router.edge import Handler, read_json
from router.errors import BadRequest, ClusterError
from router.lending import (
    LANES,
    LendingLayers,
    Link,
)

MAX_PUSHED_LINKS = 10_000
_TEXT_FIELDS = ("owner_node_id", "owner_model_id", "helper_node_id", "helper_model_id")


def _only_on_a_slave(request: web.Request) -> None:
    role = request.app[SETTINGS].cluster.role
    if role != "slave":
        raise ClusterError(f"this node is a {role}; only a slave takes its master's lending state")


async def take_settings(request: web.Request) -> web.StreamResponse:
    _only_on_a_slave(request)
    body = await read_json(request, required=True)
    try:
        values = LendingSettings.model_validate(body.get("settings"))
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        key = str(first["loc"][0]) if first["loc"] else "settings"
        raise BadRequest(f"{key}: {first['msg']}", param=key) from None
    request.app[LENDING].take_settings(values)
    return web.json_response({"ok": True})


async def show_settings(request: web.Request) -> web.StreamResponse:
    lending = request.app[LENDING].layers
    pushed = isinstance(lending, LendingLayers) and lending.pushed
    return web.json_response({"settings": lending.values.model_dump(mode="json"), "pushed": pushed})


def _link(entry: Any, index: int) -> Link:
    where = f"links[{index}]"
    if not isinstance(entry, dict) or entry.get("lane") not in LANES:
        raise BadRequest(f"{where} must be a link object with a lane of {LANES}", param=where)
    for name in _TEXT_FIELDS:
        if not isinstance(entry.get(name), str) or not entry[name]:
            raise BadRequest(f"{where}.{name} must be a non-empty string", param=where)
    flags = (entry.get("load_if_unloaded", True), entry.get("restore_after_borrow", False))
    if not all(isinstance(flag, bool) for flag in flags):
        raise BadRequest(f"{where}: the flags must be true or false", param=where)
    owner_node, owner_model, helper_node, helper_model = (entry[n] for n in _TEXT_FIELDS)
    return Link(entry["lane"], owner_node, owner_model, helper_node, helper_model, *flags)


async def take_links(request: web.Request) -> web.StreamResponse:
    _only_on_a_slave(request)
    body = await read_json(request, required=True)
    entries = body.get("links")
    if not isinstance(entries, list) or len(entries) > MAX_PUSHED_LINKS:
        raise BadRequest(f"links must be a list of at most {MAX_PUSHED_LINKS}", param="links")
    links = tuple(_link(entry, index) for index, entry in enumerate(entries))
    request.app[LENDING].take_links(links)
    return web.json_response({"ok": True, "links": len(links)})


async def show_links(request: web.Request) -> web.StreamResponse:
    return web.json_response({"links": [asdict(link) for link in request.app[LENDING].links.links]})


NODE_HANDLERS: dict[str, Handler] = {
    "node.offload_settings": show_settings,
    "node.offload_settings_set": take_settings,
    "node.routing_links": show_links,
    "node.routing_links_set": take_links,
}
