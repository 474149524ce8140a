"""Explicit model control: load, unload, shutdown, status and the runtime event stream."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from router.api.admin import event_stream
from router.appkeys import BORROWER, CATALOG, KV_CACHES, POOLED, RUNTIMES, SHUTDOWN
from router.cluster.pooled.plans import gang
from router.domain import Lane
from router.edge import Handler, read_json
from router.errors import BadRequest
from router.runtime import primary_lane, spec_for

TARGETS = {lane.value: frozenset({lane}) for lane in Lane} | {"all": frozenset(Lane)}
_LANES = tuple(lane.value for lane in Lane)
_MEMORY_KEYS = ("device", "bytes", "source")


async def load(request: web.Request) -> web.StreamResponse:
    body = await read_json(request, required=True)
    config = request.app[CATALOG].require(body.get("model"))
    lane = _lane_for(config, body.get("lane"), str(body["model"]))
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise BadRequest("dry_run must be true or false", param="dry_run")
    if dry_run:  # what a load would evict, and whether it fits: loads nothing
        plan = await request.app[RUNTIMES].plan(config, lane)
        answer = plan.answer() | {"model": body["model"]}
        # The leases this node lends that the load would ask back (docs/cluster.md).
        answer["reclaim"] = request.app[POOLED].named(plan.reclaim)
        borrower = request.app.get(BORROWER)
        if borrower is not None and gang(config, lane):
            # Its followers' nodes, ranks and shares (docs/cluster.md, "vLLM multi-node").
            answer["pooled"] = (await borrower.gang_plan(spec_for(config, lane))).answer()
        elif borrower is not None and config.rpc_nodes is not None:
            # The nodes and bytes it would lease (docs/cluster.md, "Pooled memory").
            pooled = await borrower.plan(config, spec_for(config, lane).key)
            answer["pooled"] = pooled.answer() if pooled is not None else None
        return web.json_response(answer)
    loaded = await request.app[RUNTIMES].load(config, lane)
    return web.json_response(
        {"model": body["model"], "status": loaded.state.value, "runtime": loaded.key}
    )


def _lane_for(config: Any, lane: Any, model_id: str) -> Lane:
    if lane is None:
        if model_id == config.image_id:
            return Lane.IMAGE
        return primary_lane(config)
    if not isinstance(lane, str) or lane not in _LANES:
        raise BadRequest(f"lane must be one of {', '.join(_LANES)}", param="lane")
    return Lane(lane)


async def unload(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    forget = body.get("forget_conversations")
    # Erasing a library alone unloads nothing (docs/swaps.md, "Erasing"): a runtime that
    # stays loaded no longer knows those conversations, so its stop saves none of them.
    target = body.get("target", "all" if forget is None else None)
    # A list or an object is no lane name (and is not hashable: never look it up); null (no
    # unload) is accepted only with forget_conversations.
    named = target is not None or forget is None
    if named and (not isinstance(target, str) or target not in TARGETS):
        raise BadRequest(f"target must be one of {', '.join(TARGETS)}", param="target")
    config = None if forget is None else request.app[CATALOG].require(forget)
    stopped = [] if target is None else await request.app[RUNTIMES].unload(TARGETS[target])
    answer: dict[str, Any] = {"target": target, "unloaded": stopped}
    if config is not None:  # after any stop, whose save would write them again
        answer["forgotten"] = await request.app[KV_CACHES].forget(config.id)
    return web.json_response(answer)


async def shutdown(request: web.Request) -> web.StreamResponse:
    # Answer first; the server then takes its one graceful-stop path (drain, flush, stop).
    asyncio.get_running_loop().call_later(0.05, request.app[SHUTDOWN])
    return web.json_response({"status": "shutting down"})


async def status(request: web.Request) -> web.StreamResponse:
    # One moment: nothing below awaits, so the runtimes, their memory and the queue agree,
    # and a swap in progress never holds the answer (issue 32). Estimates not read yet are
    # read in the background; their runtimes show `memory: null` meanwhile.
    runtimes = request.app[RUNTIMES]
    borrower = request.app.get(BORROWER)
    snapshot = runtimes.snapshot()
    memory, devices = runtimes.memory_now()
    for entry in snapshot:
        held = memory.get(entry["runtime"])
        entry["memory"] = None if held is None else {k: held[k] for k in _MEMORY_KEYS}
    return web.json_response(
        {
            "runtimes": snapshot,
            "queued": {lane.value: runtimes.queue_length(lane) for lane in Lane},
            "queue": runtimes.queue_status(),
            "devices": devices,
            # Memory this master borrows from lending nodes: one device per node and runtime.
            "remote_devices": borrower.rows() if borrower is not None else [],
        }
    )


async def events(request: web.Request) -> web.StreamResponse:
    return await event_stream.stream(request)


HANDLERS: dict[str, Handler] = {
    "control.load": load,
    "control.unload": unload,
    "control.shutdown": shutdown,
    "control.status": status,
    "control.events": events,
}
