"""The master's site APIs for another node: the request goes to that node, by id.

A route that declares `names_node` (router/classify.py) is resolved by the dispatcher before its
handler runs (`relay_named`): a registered slave's `node_id` is relayed there, this node's id (or
none) runs the handler. A site handler not yet declared that finds `node_id` naming a registered
slave raises RemoteNode, which `relayable` catches. Either way the relay sends the same method, query and body to that node's copy of the route (`classify.node_path`:
`/router/v1/node/site/...`, `/router/v1/node/benchmarks...`, or the contract's own node path
such as `/router/v1/node/store/download`) with the cluster token, and streams the node's answer back as
it is, through the node client's streamed mode. The address always comes from the registry (R34).
"""

from __future__ import annotations

from aiohttp import web

from router.appkeys import CLUSTER
from router.classify import node_path
from router.cluster import NodeEntry, RemoteNode
from router.edge import ADDRESSED, Handler, control_cap, node_named, read_body
from router.errors import NotFound

_KEPT_HEADERS = ("Content-Type", "Content-Disposition", "Content-Length", "Cache-Control")


def relayable(handler: Handler) -> Handler:
    async def site(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except RemoteNode as remote:
            return await relay_site(request, remote)

    return site


async def relay_named(request: web.Request, *, relay: bool) -> web.StreamResponse | None:
    """The dispatcher's step for a `names_node` route: the call's query `node_id` resolved before
    the handler. None = this node answers (the handler runs, ADDRESSED set); on a master with
    `relay`, another registered node's answer; an unknown id is a 404 (NotFound), as before."""
    cluster = request.app[CLUSTER]
    named = node_named(request)  # the query's node_id; a node_url is refused (400) first
    entry = cluster.named_node(named)
    if entry is None:
        request[ADDRESSED] = cluster.settings.node_id
        return None
    if not relay:  # a node's own copy of the route: it answers only for itself
        raise NotFound(f"unknown node {named[:64]!r}", param="node_id")
    return await relay_to(request, entry)


async def relay_site(request: web.Request, remote: RemoteNode) -> web.StreamResponse:
    return await relay_to(request, remote.entry)


async def relay_to(request: web.Request, entry: NodeEntry) -> web.StreamResponse:
    client = request.app[CLUSTER].client
    # The handler read the body already (kept under RAW_BODY), or this reads it, capped.
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
