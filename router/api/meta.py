"""`/health` and `/metrics`: answered by the router itself, never forwarded."""

from __future__ import annotations

from aiohttp import web

from router.api.common import Handler
from router.appkeys import METRICS, RUNTIMES
from router.domain import Lane


async def health(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.StreamResponse:
    registry = request.app[METRICS]
    runtimes = request.app[RUNTIMES]
    for lane in Lane:
        registry.queued.labels(lane.value).set(runtimes.queue_length(lane))
    in_flight: dict[str, int] = {lane.value: 0 for lane in Lane}
    for runtime in runtimes.runtimes():
        for lane in runtime.spec.occupies:
            in_flight[lane.value] += runtime.leases
    for lane_name, count in in_flight.items():
        registry.in_flight.labels(lane_name).set(count)
    return web.Response(body=registry.render(), headers={"Content-Type": registry.content_type})


HANDLERS: dict[str, Handler] = {"meta.health": health, "meta.metrics": metrics}
