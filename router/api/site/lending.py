"""`/router/v1/site/routing-groups` (image lane) and `/router/v1/site/text-routing-groups`
(text lane): the lending links of one anchor model, its candidates, replace and delete
(docs/lending.md). The request-time half is router/lending/owner.py."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from router.appkeys import CLUSTER, LENDING, SETTINGS
from router.cluster import NodeModel
from router.edge import Handler, node_named, read_json, refuse_addresses
from router.errors import BadRequest, NotFound
from router.lending import (
    Link,
    LinkTable,
    Side,
    ineligible_reason,
    parse_links,
)

Known = dict[tuple[str, str], NodeModel]


def known_models(request: web.Request, lane: str) -> Known:
    """Every model on `lane` this node knows: its own and, on a master, each registered node's
    last snapshot (a node that is down keeps its models here, so its links stay editable)."""
    own = request.app[SETTINGS].cluster.node_id
    service = request.app[CLUSTER]
    found: Known = {(own, m.local_id): m for m in service.local_models() if lane in m.lanes}
    if request.app[SETTINGS].cluster.role == "master":
        for entry in service.registry.nodes():
            if entry.node_id and entry.node_id != own:
                for m in entry.models:
                    if lane in m.lanes:
                        found[(entry.node_id, m.local_id)] = m
    return found


def _side(key: tuple[str, str], known: Known) -> Side:
    return Side.of(key[0], known[key])


def _anchor_of(request: web.Request, lane: str, known: Known) -> tuple[str, str]:
    own = request.app[SETTINGS].cluster.node_id
    model_id = request.query.get("model_id", "")
    if not model_id:
        raise BadRequest("model_id is required", param="model_id")
    anchor = (node_named(request) or own, model_id)  # any node with the model: no relay
    if anchor not in known:
        raise NotFound(f"no {lane} model {model_id[:256]!r} on node {anchor[0][:64]!r}")
    return anchor


def _candidate(
    lane: str, anchor: tuple[str, str], key: tuple[str, str], known: Known, table: LinkTable
) -> dict[str, Any]:
    model, own = known[key], known[anchor]
    reason = ineligible_reason(lane, _side(anchor, known), _side(key, known))
    return {
        "node_id": key[0],
        "model_id": key[1],
        "filename": model.filename,
        "model_hash": model.model_hash,
        "config_hash": model.config_hash,
        "context_size": model.context_length,
        "multimodal": model.multimodal,
        "weights_match": model.model_hash is not None and model.model_hash == own.model_hash,
        "eligible": reason is None,
        "ineligible_reason": reason,
        "lends_to": any(link.helper == key for link in table.owned(lane, *anchor)),
        "borrows_from": any(link.owner == key for link in table.borrows_from(lane, *anchor)),
    }


def _listing(request: web.Request, lane: str) -> web.Response:
    known = known_models(request, lane)
    anchor = _anchor_of(request, lane, known)
    table = request.app[LENDING].links
    links = [link for link in table.links if link.touches(lane, anchor)]
    candidates = [
        _candidate(lane, anchor, key, known, table) for key in sorted(known) if key != anchor
    ]
    return web.json_response(
        {
            "anchor": {"node_id": anchor[0], "model_id": anchor[1]},
            "links": [link.to_dict() for link in links],
            "candidates": candidates,
        }
    )


def _check(links: tuple[Link, ...], lane: str, known: Known) -> None:
    """Every link joins two known models that can lend to each other, or nothing changes."""
    for link in links:
        for key in (link.owner, link.helper):
            if key not in known:
                raise BadRequest(f"no {lane} model {key[1]!r} on node {key[0]!r}", param="lends_to")
        reason = ineligible_reason(lane, _side(link.owner, known), _side(link.helper, known))
        if reason is not None:
            raise BadRequest(
                f"{link.owner_model_id!r}@{link.owner_node_id} cannot lend to "
                f"{link.helper_model_id!r}@{link.helper_node_id}: {reason}",
                code=reason,
                param="lends_to",
            )


async def _replace(request: web.Request, lane: str) -> web.Response:
    body = await read_json(request, required=True)
    refuse_addresses(request, body)
    known = known_models(request, lane)
    anchor, links = parse_links(body, lane, request.app[SETTINGS].cluster.node_id)
    if anchor not in known:
        raise NotFound(f"no {lane} model {anchor[1]!r} on node {anchor[0]!r}", param="anchor")
    _check(links, lane, known)
    await request.app[LENDING].replace_links(lane, anchor, links)
    return web.json_response(
        {
            "ok": True,
            "anchor": {"node_id": anchor[0], "model_id": anchor[1]},
            "links": [link.to_dict() for link in links],
        }
    )


async def _delete(request: web.Request, lane: str) -> web.Response:
    own = request.app[SETTINGS].cluster.node_id
    model_id = request.query.get("model_id", "")
    if not model_id:
        raise BadRequest("model_id is required", param="model_id")
    anchor = (node_named(request) or own, model_id)  # any node with the model: no relay
    removed = await request.app[LENDING].replace_links(lane, anchor, ())
    if not removed:
        raise NotFound(f"no {lane} links for {model_id[:256]!r} on node {anchor[0][:64]!r}")
    return web.json_response({"ok": True, "removed": removed})


def _handler(lane: str) -> Handler:
    async def routing_links(request: web.Request) -> web.StreamResponse:
        refuse_addresses(request)
        if request.method == "GET":
            return _listing(request, lane)
        if request.method == "DELETE":
            return await _delete(request, lane)
        return await _replace(request, lane)

    return routing_links


HANDLERS: dict[str, Handler] = {
    "site.routing_groups": _handler("image"),
    "site.text_routing_groups": _handler("text"),
}
