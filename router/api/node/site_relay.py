"""The master's site APIs for another node: the request goes to that node, by id.

A site handler that finds `node_id` naming a registered slave raises RemoteNode; this wrapper
sends the same method, query and body to that node's copy of the route (`classify.node_path`:
`/router/v1/node/site/...`, `/router/v1/node/benchmarks...`, or the contract's own node path
such as `/router/v1/node/store/download`) with the cluster token, and streams the node's answer back as
it is, through the node client's streamed mode. The address always comes from the registry (R34).
"""

from __future__ import annotations

from aiohttp import web

from router.appkeys import CLUSTER
from router.classify import node_path
from router.cluster import RemoteNode
from router.edge import Handler, control_cap, read_body

_KEPT_HEADERS = ("Content-Type", "Content-Disposition", "Content-Length", "Cache-Control")


def relayable(handler: Handler) -> Handler:
    async def site(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except RemoteNode as remote:
            return await relay_site(request, remote)

    return site


async def relay_site(request: web.Request, remote: RemoteNode) -> web.StreamResponse:
    client = request.app[CLUSTER].client
    # The handler read the body already (kept under RAW_BODY), or this reads it, capped.
    body = await read_body(request, control_cap(request))
    headers = {"Content-Type": request.content_type} if request.content_type and body else {}
    upstream = await client.stream(
        request.method,
        remote.entry.node_url,
        node_path(request.path),
        params=request.query,
        data=body or None,
        headers=headers,
        label=f"node {remote.entry.node_id!r}",
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
