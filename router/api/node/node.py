"""`/router/v1/node/...`: what one router asks of another (cluster token only).

The master polls `models` and `runtime-status`, a slave posts `register`, and requests the
master sends on go to `inference/<path>`, which this node dispatches as if a client had sent
`<path>` here: the same handlers, the same analytics (recorded here, the node that did the
work), the same error shapes. The master's site and benchmark calls that name this node come
to the node copies of the management rows (`node.site`), at the contract's paths
(`/router/v1/node/store/download`, ...) or their `/router/v1/node/site/...` aliases.
"""

from __future__ import annotations

import time

from aiohttp import web
from pydantic import ValidationError

from router.api.node import lending_push
from router.appkeys import (
    CLUSTER,
    DISPATCH,
    LENDING,
    MATCH,
    NODE_DISPATCH,
    ROUTE,
    RUNTIMES,
    SETTINGS,
)
from router.classify import Match, management_path, match
from router.cluster import Snapshot
from router.domain import Caller, Lane, Role
from router.edge import CALLER, Handler, match_of, read_json, secrets_of
from router.errors import ClusterError, NotFound, RouterError, render
from router.inference import LENT
from router.keys import CALLER_HEADER, parse_caller
from router.lending import WIRE_HEADERS, Lent, parse_lent


async def models(request: web.Request) -> web.StreamResponse:
    service = request.app[CLUSTER]
    settings = request.app[SETTINGS]
    url = settings.cluster.public_url or f"http://{settings.server.bind}"
    await service.refresh_memory()
    snap = service.own_snapshot(url)
    return web.json_response(snap.model_dump(mode="json"))


async def register(request: web.Request) -> web.StreamResponse:
    service = request.app[CLUSTER]
    if service.role != "master":
        raise ClusterError(f"this node is a {service.role}; register with the master")
    body = await read_json(request, required=True)
    try:
        snap = Snapshot.model_validate(body)
    except ValidationError as err:
        raise ClusterError(f"the snapshot is not valid: {err.error_count()} problem(s)") from None
    service.register(snap, time.time())  # lending follows: it pushes its state to the node
    return web.json_response({"ok": True})


async def runtime_status(request: web.Request) -> web.StreamResponse:
    return web.json_response(request.app[LENDING].status_body())


async def state(request: web.Request) -> web.StreamResponse:
    runtimes = request.app[RUNTIMES]
    return web.json_response(
        {
            "node_id": request.app[SETTINGS].cluster.node_id,
            "runtimes": runtimes.snapshot(),
            "queued": {lane.value: runtimes.queue_length(lane) for lane in Lane},
        }
    )


def _inner_path_ok(path: str) -> bool:
    # One leading slash only: `//host/x` or `/\host` would read as another authority.
    return path.startswith("/") and path[1:2] not in ("/", "\\")


async def inference(request: web.Request) -> web.StreamResponse:
    """Serve the inner path as a client request made to this node (its own routing and
    records); the route table classifies it, as it does a client's."""
    path = "/" + match_of(request).params.get("path", "")
    if not _inner_path_ok(path):
        raise NotFound("the inner path must be a local path")
    found = match(request.method, path)  # RouteNotFound / MethodNotAllowed as for a client
    if found.route.role is not Role.INFERENCE:
        raise NotFound(f"{path} is not an inference route")
    lent = parse_lent(request.headers)  # lent by its owner (lending.md); BadRequest if malformed
    # The master's scoped key, by name and class: trusted here, behind the cluster token only.
    caller = parse_caller(request.headers.get(CALLER_HEADER))
    return await _dispatch_inner(request, path, found, request.app[DISPATCH], lent, caller)


_INNER_DROPPED = frozenset(
    {"authorization", CALLER_HEADER.lower(), *(h.lower() for h in WIRE_HEADERS)}
)


async def _dispatch_inner(
    request: web.Request,
    path: str,
    found: Match,
    dispatch: Handler,
    lent: Lent | None = None,
    caller: Caller | None = None,
) -> web.StreamResponse:
    query = request.query_string
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _INNER_DROPPED}
    inner = request.clone(rel_url=path + ("?" + query if query else ""), headers=headers)
    inner[ROUTE], inner[MATCH] = found.route, found
    if caller is not None:
        inner[CALLER] = caller
    if lent is not None:
        inner[LENT] = lent
    try:
        return await dispatch(inner)
    except RouterError as err:
        if request.writer.output_size > 0:
            raise
        # The client's own API shape, not the node surface's: the master relays it unchanged.
        return render(err, found.route.surface, secrets_of(request.app[SETTINGS]))


async def site(request: web.Request) -> web.StreamResponse:
    """The master's site or benchmark call for this node, served by this node's handlers.

    Its row is a copy of the management row (router/classify/nodes.py `_node_copies`), so the method
    was checked already; the inner match gives the management route and its parameters."""
    path = management_path(request.path)
    found = match(request.method, path)
    return await _dispatch_inner(request, path, found, request.app[NODE_DISPATCH])


HANDLERS: dict[str, Handler] = {
    "node.models": models,
    "node.register": register,
    "node.runtime_status": runtime_status,
    "node.state": state,
    "node.inference": inference,
    "node.site": site,
    **lending_push.NODE_HANDLERS,
}
