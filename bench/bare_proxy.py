"""The floor of any aiohttp proxy: aiohttp's server and client with nothing of the router's.

`python bench/bare_proxy.py PORT UPSTREAM_URL`: every request is read whole, sent to the same
path upstream on one pooled keep-alive session, and the answer's body and content type sent
back in one write; the event loop is uvloop's, as the router's. bench/profile_proxy.py runs it
beside the router in front of the same backend: what the router adds beyond this arm is the
router's own cost, the rest is aiohttp's (and the extra loopback hop's).
"""

from __future__ import annotations

import sys

import aiohttp
import uvloop
from aiohttp import web


def build(upstream: str) -> web.Application:
    app = web.Application()
    session_key = web.AppKey("session", aiohttp.ClientSession)

    async def start(app: web.Application) -> None:
        app[session_key] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )

    async def stop(app: web.Application) -> None:
        await app[session_key].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        url = upstream + request.path_qs
        async with app[session_key].request(request.method, url, data=body, headers=headers) as r:
            data = await r.read()
            ctype = r.headers.get("Content-Type", "application/json")
            return web.Response(status=r.status, body=data, headers={"Content-Type": ctype})

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def main() -> None:
    port, upstream = int(sys.argv[1]), sys.argv[2].rstrip("/")
    uvloop.install()
    web.run_app(build(upstream), host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
