"""The master's site APIs for another node: the request goes to that node, by id.

A site handler that finds `node_id` naming a registered slave raises RemoteNode; this wrapper
sends the same method, query and body to that node's copy of the route (`classify.node_path`:
`/router/v1/node/site/...`, `/router/v1/node/benchmarks...`, or the contract's own node path
such as `/router/v1/node/store/download`) with the cluster token, and streams the node's answer back as
it is. The address always comes from the registry (R34).
"""

from __future__ import annotations

import aiohttp
from aiohttp import web

from router.appkeys import CLUSTER, SESSION
from router.classify import node_path
from router.cluster import RemoteNode
from router.edge import Handler, control_cap, read_body
from router.errors import BadGateway, GatewayTimeout

_KEPT_HEADERS = ("Content-Type", "Content-Disposition", "Content-Length", "Cache-Control")


def relayable(handler: Handler) -> Handler:
    async def site(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except RemoteNode as remote:
            return await relay_site(request, remote)

    return site


async def relay_site(request: web.Request, remote: RemoteNode) -> web.StreamResponse:
    service = request.app[CLUSTER]
    path = node_path(request.path)
    url = service.client.url(remote.entry.node_url, path)
    # The handler read the body already (kept under RAW_BODY), or this reads it, capped.
    body = await read_body(request, control_cap(request))
    headers = service.client.headers()
    if request.content_type and body:
        headers["Content-Type"] = request.content_type
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=600)
    try:
        upstream = await request.app[SESSION].request(
            request.method, url, params=request.query, data=body or None, headers=headers,
            timeout=timeout, allow_redirects=False,
        )  # fmt: skip
    except TimeoutError:
        raise GatewayTimeout(f"node {remote.entry.node_id!r} did not answer in time") from None
    except aiohttp.ClientError as err:
        raise BadGateway(f"node {remote.entry.node_id!r} is unreachable: {err}") from None
    async with upstream:
        out = web.StreamResponse(status=upstream.status)
        for name in _KEPT_HEADERS:
            if name in upstream.headers:
                out.headers[name] = upstream.headers[name]
        await out.prepare(request)
        async for chunk in upstream.content.iter_any():
            await out.write(chunk)
        await out.write_eof()
    return out
