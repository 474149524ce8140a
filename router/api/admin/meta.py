"""`/health`, `/metrics` and the OpenAPI description: answered by the router itself."""

from __future__ import annotations

from aiohttp import web

from router.appkeys import METRICS, RUNTIMES, SETTINGS
from router.edge import Handler
from router.memory.now import MemoryNow, memory_now
from router.openapi import document
from router.records.metrics import MemoryFigures, RuntimeBytes


async def health(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.StreamResponse:
    registry = request.app[METRICS]
    runtimes = request.app.get(RUNTIMES)
    # Read at scrape time from the function GET /router/v1/status calls (one computation path).
    memory = None
    if runtimes is not None:
        memory = figures(await memory_now(runtimes.views(), request.app[SETTINGS]))
    return web.Response(
        body=registry.render(memory), headers={"Content-Type": registry.content_type}
    )


def figures(now: MemoryNow) -> MemoryFigures:
    """The status's memory picture as the metric series' rows."""
    runtimes = [
        RuntimeBytes(
            model=now.held[key].config.id,
            lane=now.held[key].lane.value,
            device=str(usage["device"]),
            source=str(usage["source"]),
            bytes=int(usage["bytes"]),
        )
        for key, usage in now.runtimes.items()
    ]
    return MemoryFigures(tuple(now.devices), tuple(runtimes))


async def openapi(request: web.Request) -> web.StreamResponse:
    return web.json_response(document())


HANDLERS: dict[str, Handler] = {
    "meta.health": health,
    "meta.metrics": metrics,
    "meta.openapi": openapi,
}
