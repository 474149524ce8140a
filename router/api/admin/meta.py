"""`/health`, `/metrics` and the OpenAPI description: answered by the router itself."""

from __future__ import annotations

from aiohttp import web

from router.appkeys import METRICS
from router.edge import Handler
from router.openapi import document


async def health(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.StreamResponse:
    registry = request.app[METRICS]
    return web.Response(body=registry.render(), headers={"Content-Type": registry.content_type})


async def openapi(request: web.Request) -> web.StreamResponse:
    return web.json_response(document())


HANDLERS: dict[str, Handler] = {
    "meta.health": health,
    "meta.metrics": metrics,
    "meta.openapi": openapi,
}
