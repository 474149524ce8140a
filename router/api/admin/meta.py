"""`/health`, `/metrics` and the OpenAPI description: answered by the router itself."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from router.appkeys import METRICS, RUNTIMES
from router.edge import Handler
from router.openapi import document
from router.records.metrics import MemoryFigures, RuntimeBytes


async def health(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.StreamResponse:
    registry = request.app[METRICS]
    runtimes = request.app.get(RUNTIMES)
    # Read at scrape time from the snapshot GET /router/v1/status shows (one source, one
    # moment): a scrape never waits for an estimate being read or a load under way.
    memory = None
    if runtimes is not None:
        memory = figures(*runtimes.memory_now())
    return web.Response(
        body=registry.render(memory), headers={"Content-Type": registry.content_type}
    )


def figures(per_runtime: dict[str, dict[str, Any]], devices: list[dict[str, Any]]) -> MemoryFigures:
    """The status's memory picture as the metric series' rows."""
    runtimes = [
        RuntimeBytes(
            model=str(usage["model"]),
            lane=str(usage["lane"]),
            device=str(usage["device"]),
            source=str(usage["source"]),
            bytes=int(usage["bytes"]),
        )
        for usage in per_runtime.values()
    ]
    return MemoryFigures(tuple(devices), tuple(runtimes))


async def openapi(request: web.Request) -> web.StreamResponse:
    return web.json_response(document())


HANDLERS: dict[str, Handler] = {
    "meta.health": health,
    "meta.metrics": metrics,
    "meta.openapi": openapi,
}
