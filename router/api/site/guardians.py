"""`/router/v1/site/guardian-models`: assign the multimodal model that answers image requests
for text-only models (docs/guardians.md). The request-time check the forwarder calls is
router/api/inference/guardian.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from router.appkeys import CATALOG, CLUSTER, GUARDIANS, SETTINGS, STORE
from router.cluster import (
    GuardianTable,
    has_vision,
    parse_assignment,
    parse_key,
)
from router.domain import Lane
from router.edge import Handler, read_json, refuse_addresses
from router.errors import BadRequest, NotFound


async def guardians_context(app: web.Application) -> AsyncIterator[None]:
    app[GUARDIANS] = await GuardianTable.load(app[STORE].guardians)
    yield


def candidates(request: web.Request) -> list[dict[str, Any]]:
    """Multimodal models this node and (on a master) the cluster offer as guardians."""
    own = request.app[SETTINGS].cluster.node_id
    found: list[dict[str, Any]] = [
        {"node_id": own, "model_id": c.id, "filename": c.path.name}
        for c in request.app[CATALOG].configs()
        if Lane.TEXT in c.lanes and has_vision(c)
    ]
    if request.app[SETTINGS].cluster.role == "master":
        for public in request.app[CLUSTER].public_models():
            for replica in public.replicas:
                if not replica.local and replica.model.multimodal:
                    found.append(
                        {
                            "node_id": replica.node_id,
                            "model_id": replica.local_id,
                            "filename": replica.model.filename,
                        }
                    )
    return found


async def guardian_models(request: web.Request) -> web.StreamResponse:
    refuse_addresses(request)
    if request.method == "GET":
        return _listing(request)
    if request.method == "DELETE":
        return await _clear(request)
    body = await read_json(request, required=True)
    refuse_addresses(request, body)
    own = request.app[SETTINGS].cluster.node_id
    assignment = parse_assignment(body, own)
    offered = {(c["node_id"], c["model_id"]) for c in candidates(request)}
    if (assignment.guardian_node_id, assignment.guardian_model_id) not in offered:
        raise BadRequest(
            f"{assignment.guardian_model_id!r} on {assignment.guardian_node_id!r} is not a "
            "multimodal model (a configuration with mmproj, or vLLM with router_vision: true)",
            param="guardian",
        )
    await request.app[GUARDIANS].assign(assignment)
    return web.json_response({"ok": True, "assignment": assignment.to_dict()})


def _listing(request: web.Request) -> web.Response:
    table = request.app[GUARDIANS]
    return web.json_response(
        {
            "assignments": [a.to_dict() for a in table.assignments],
            "candidates": candidates(request),
        }
    )


async def _clear(request: web.Request) -> web.Response:
    scope, node_id, model_id = parse_key(request.query, request.app[SETTINGS].cluster.node_id)
    removed = await request.app[GUARDIANS].clear(scope, node_id, model_id)
    if not removed:
        raise NotFound(f"no {scope}-scope guardian assignment matches")
    return web.json_response({"ok": True, "removed": removed})


HANDLERS: dict[str, Handler] = {"site.guardian_models": guardian_models}
