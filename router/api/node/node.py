"""`/router/v1/node/...`: what one router asks of another (cluster token only).

The master polls `models` and `runtime-status`, a slave posts `register`, and requests the
master sends on go to `inference/<path>`, which this node dispatches as if a client had sent
`<path>` here: the same handlers, the same analytics (recorded here, the node that did the
work), the same error shapes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from aiohttp import web
from pydantic import ValidationError

from router.api.common import Handler, match_of, read_control_json
from router.api.node import lending_push
from router.appkeys import CLUSTER, DISPATCH, MATCH, NODE_DISPATCH, ROUTE, RUNTIMES, SETTINGS
from router.classify import Match, match
from router.cluster import Snapshot, snapshot
from router.domain import Lane, Role
from router.edge import secrets_of
from router.errors import ClusterError, NotFound, RouteNotFound, RouterError, render
from router.lending import (
    BORROWED,
    BORROWED_OWNER,
    BORROWED_RESTORE,
    WIRE_HEADERS,
    Lent,
    parse_lent,
    status_body,
)
from router.lending import registered as lending_registered

INFERENCE = "inference/"


async def node_dispatch(request: web.Request) -> web.StreamResponse:
    tail = match_of(request).params.get("tail", "")
    if tail.startswith(INFERENCE):
        return await inference(request, "/" + tail[len(INFERENCE) :])
    if tail.startswith(("site/", "benchmarks")):
        return await management(request, "/router/v1/" + tail)
    handler = _TABLE.get((request.method, tail))
    if handler is None:
        raise RouteNotFound(request.path)
    return await handler(request)


async def models(request: web.Request) -> web.StreamResponse:
    service = request.app[CLUSTER]
    settings = request.app[SETTINGS]
    url = settings.cluster.public_url or f"http://{settings.server.bind}"
    snap = snapshot(settings.cluster.node_id, url, service.local_models())
    return web.json_response(snap.model_dump(mode="json"))


async def register(request: web.Request) -> web.StreamResponse:
    service = request.app[CLUSTER]
    if service.role != "master":
        raise ClusterError(f"this node is a {service.role}; register with the master")
    body = await read_control_json(request, required=True)
    try:
        snap = Snapshot.model_validate(body)
    except ValidationError as err:
        raise ClusterError(f"the snapshot is not valid: {err.error_count()} problem(s)") from None
    service.registry.register(snap, time.time())
    service.changed()
    lending_registered(request.app, snap.node_id)  # its lending settings and links
    return web.json_response({"ok": True})


async def runtime_status(request: web.Request) -> web.StreamResponse:
    return web.json_response(status_body(request.app))


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


async def inference(request: web.Request, path: str) -> web.StreamResponse:
    """Serve `path` as a client request made to this node (its own routing and records)."""
    if not _inner_path_ok(path):
        raise NotFound("the inner path must be a local path")
    found = match(request.method, path)  # RouteNotFound / MethodNotAllowed as for a client
    if found.route.role is not Role.INFERENCE:
        raise NotFound(f"{path} is not an inference route")
    lent = parse_lent(request.headers)  # lent by its owner (lending.md); BadRequest if malformed
    return await _dispatch_inner(request, path, found, request.app[DISPATCH], lent)


_INNER_DROPPED = frozenset({"authorization", *(h.lower() for h in WIRE_HEADERS)})


async def _dispatch_inner(
    request: web.Request,
    path: str,
    found: Match,
    dispatch: Handler,
    lent: Lent | None = None,
) -> web.StreamResponse:
    query = request.query_string
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _INNER_DROPPED}
    inner = request.clone(rel_url=path + ("?" + query if query else ""), headers=headers)
    inner[ROUTE], inner[MATCH] = found.route, found
    if lent is not None:
        inner[BORROWED], inner[BORROWED_RESTORE] = lent.allow_load, lent.restore
        if lent.owner is not None:
            inner[BORROWED_OWNER] = lent.owner
    try:
        return await dispatch(inner)
    except RouterError as err:
        if request.writer.output_size > 0:
            raise
        # The client's own API shape, not the node surface's: the master relays it unchanged.
        return render(err, found.route.surface, secrets_of(request.app[SETTINGS]))


async def management(request: web.Request, path: str) -> web.StreamResponse:
    """The master's site or benchmark call for this node, served by this node's handlers."""
    found = match(request.method, path)
    if not found.route.template.startswith(("/router/v1/site/", "/router/v1/benchmarks")):
        raise RouteNotFound(path)
    return await _dispatch_inner(request, path, found, request.app[NODE_DISPATCH])


def _control(path: str) -> Handler:
    """The handler of the control route `path`, served for the master as for an admin."""

    async def control(request: web.Request) -> web.StreamResponse:
        return await _dispatch_inner(request, path, match(request.method, path),
                                     request.app[NODE_DISPATCH])  # fmt: skip

    return control


_TABLE: Mapping[tuple[str, str], Handler] = {
    ("GET", "models"): models,
    ("POST", "register"): register,
    ("GET", "runtime-status"): runtime_status,
    ("GET", "state"): state,
    # The admin control routes' own handlers, reached through the app's table (so this
    # package does not import the admin one).
    ("POST", "load"): _control("/router/v1/load"),
    ("POST", "unload"): _control("/router/v1/unload"),
    **lending_push.NODE_ROUTES,
}

HANDLERS: dict[str, Handler] = {"node.dispatch": node_dispatch}
