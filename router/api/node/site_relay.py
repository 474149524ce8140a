"""The master's site APIs for another node: the request goes to that node, by id.

A route's row declares whether and where its call names a node (`names_node`,
router/classify/table.py); the dispatcher resolves it here before any handler runs (`relay_named`):
the query's `node_id`, the JSON body's (read once, capped, and kept for the handler and the
relay), or the repeated `node` filters of a read over the nodes' records. A registered slave's
id is relayed there; this node's id (or none) runs the handler, which reads it back with
`addressed_node`. The relay sends the same method, query and body to that node's copy of the
route (`classify.node_path`: `/router/v1/node/site/...`, `/router/v1/node/benchmarks...`, or
the contract's own node path such as `/router/v1/node/store/download`) with the cluster token,
and streams the node's answer back as it is, through the node client's streamed mode. The
address always comes from the registry (R34).
"""

from __future__ import annotations

from aiohttp import web

from router.appkeys import CLUSTER
from router.classify import NamesNode, node_path
from router.cluster import NodeEntry
from router.edge import ADDRESSED, control_cap, node_filter, node_named, read_body, read_json
from router.errors import NotFound

_KEPT_HEADERS = ("Content-Type", "Content-Disposition", "Content-Length", "Cache-Control")


async def relay_named(
    request: web.Request, names: NamesNode, *, relay: bool
) -> web.StreamResponse | None:
    """The dispatcher's step for a route that names a node. None = this node answers (the
    handler runs; ADDRESSED is set when one node, this one, was named or none); on a master
    with `relay`, another registered node's answer. An unknown id is a 404 (NotFound); a
    node's own copy of the route (`relay` False) answers only for itself."""
    named = await _named(request, names)
    if named is None:
        return None
    cluster = request.app[CLUSTER]
    entry = cluster.named_node(named)
    if entry is None:
        request[ADDRESSED] = cluster.settings.node_id
        return None
    if not relay:
        raise NotFound(f"unknown node {named[:64]!r}", param="node_id")
    return await relay_to(request, entry)


async def _named(request: web.Request, names: NamesNode) -> str | None:
    """The one node id the call names ("" = none), or None when the handler decides: a
    `node_id` kept as data (KEY), or a filter over several nodes (FILTER: a master's FANOUT
    merges them, a route that cannot refuses them). A `node_url` is refused (400) first."""
    if names is NamesNode.QUERY:
        return node_named(request)
    if names is NamesNode.BODY:
        # Read here once (the control cap, the body deadline); the handler's read_json and the
        # relay get the kept bytes.
        return node_named(request, await read_json(request))
    if names is NamesNode.FILTER:
        distinct = set(node_filter(request))
        if len(distinct) > 1:
            return None
        return distinct.pop() if distinct else ""
    return None


async def relay_to(request: web.Request, entry: NodeEntry) -> web.StreamResponse:
    client = request.app[CLUSTER].client
    # Kept under RAW_BODY when the dispatcher read it (a body-named call), else read here, capped.
    body = await read_body(request, control_cap(request))
    headers = {"Content-Type": request.content_type} if request.content_type and body else {}
    upstream = await client.stream(
        request.method,
        entry.node_url,
        node_path(request.path),
        params=request.query,
        data=body or None,
        headers=headers,
        label=f"node {entry.node_id!r}",
    )
    async with upstream:
        out = web.StreamResponse(status=upstream.status)
        for name in _KEPT_HEADERS:
            if name in upstream.headers:
                out.headers[name] = upstream.headers[name]
        await out.prepare(request)
        async for chunk in upstream.chunks():
            await out.write(chunk)
        await out.write_eof()
    return out
