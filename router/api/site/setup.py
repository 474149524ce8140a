"""Site routes for backend set-up: init jobs and vLLM's launch options (docs/backends-setup.md).

Every route takes `node_id` (query or body; default this node; another node is a 404 until
the cluster forwards). An init answers 202 with the job at once; its progress is on
`GET .../init/{job_id}` (the job), `.../events` (server-sent events, replayed from the start),
`.../output` (captured stdout/stderr, paged like a load capture), on `/router/v1/events`
(`backend_init`), and as `initialization_*` in `GET site/nodes/state`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from backends.base import BackendError
from backends.recipes import Recipe
from backends.registry import adapter_for
from router.appkeys import BACKEND_SETUP, INFLIGHT, LAUNCH_OPTIONS, RUNTIMES, SETTINGS
from router.domain import Family, Lane
from router.edge import SSE_HEADERS, Handler, addressed_node, match_of, query_int, read_json
from router.edge.inflight import ended_at_deadline
from router.errors import BadRequest, NotFound
from router.forwarding import encode_event
from router.setup import SetupJob, check_backend, output_page, parse_options

SSE_HEARTBEAT = 15.0
_MAX_PAGE = 1000


def _program_found(request: web.Request, family: Family) -> bool:
    """Whether a launch of `family` would find a program now (settings, PATH, built)."""
    try:
        adapter_for(family).program(request.app[SETTINGS])
    except BackendError:
        return False
    return True


def backend_state(request: web.Request, recipe: Recipe) -> dict[str, Any]:
    service = request.app[BACKEND_SETUP]
    build = service.layout(recipe).record()
    running = service.running(recipe.backend_id)
    last = service.last_record(recipe.backend_id) or {}
    installed = build is not None or _program_found(request, recipe.family)
    if running is not None:
        lifecycle = "initializing"
    elif installed:
        lifecycle = "ready"
    elif last.get("state") == "failed":
        lifecycle = "failed"
    else:
        lifecycle = "not_initialized"
    return {
        "id": recipe.backend_id,
        "display_name": recipe.display_name,
        "family": recipe.family.value,
        "lifecycle_state": lifecycle,
        "installed": installed,
        "runtime_version": build.get("version") if build else None,
        "recipe_version": recipe.version,
        "initialization_state": last.get("state"),
        "initialization_job_id": last.get("id"),
        "initialization_phase": last.get("phase"),
        "initialization_step": last.get("step"),
        "initialization_steps": last.get("steps"),
        "initialization_started_at": last.get("started_at"),
        "initialization_ended_at": last.get("ended_at"),
        "initialization_error": last.get("error"),
        "retryable": bool(last.get("retryable")),
        "error": last.get("error") if lifecycle == "failed" else None,
    }


def backends_state(request: web.Request) -> list[dict[str, Any]]:
    """Every backend the node has a recipe for (the node state's `backends`)."""
    recipes = request.app[BACKEND_SETUP].recipes.values()
    return [backend_state(request, recipe) for recipe in recipes]


async def backends_init(request: web.Request) -> web.Response:
    body = await read_json(request, required=True)
    addressed_node(request)
    if "profile" in body and body["profile"] is not None and not isinstance(body["profile"], str):
        raise BadRequest("profile must be a string", param="profile")
    job = request.app[BACKEND_SETUP].start(body.get("backend_id"))
    return web.json_response(job.record(), status=202)


async def backends_init_cancel(request: web.Request) -> web.Response:
    body = await read_json(request, required=True)
    addressed_node(request)
    job = await asyncio.shield(request.app[BACKEND_SETUP].cancel(body.get("backend_id")))
    return web.json_response(job.record())


async def backends_init_status(request: web.Request) -> web.Response:
    node_id = addressed_node(request)
    service = request.app[BACKEND_SETUP]
    wanted = request.query.get("backend_id")
    recipes = [service.recipe(wanted)] if wanted else list(service.recipes.values())
    return web.json_response(
        {"node_id": node_id, "backends": [backend_state(request, r) for r in recipes]}
    )


def _job_id(request: web.Request) -> str:
    addressed_node(request)
    return match_of(request).params["job_id"]


def _no_job(job_id: str) -> NotFound:
    return NotFound(f"no init job {job_id[:64]!r} on this node", param="job_id")


async def backends_init_job(request: web.Request) -> web.Response:
    job_id = _job_id(request)
    service = request.app[BACKEND_SETUP]
    job = service.job(job_id)
    record = job.record() if job is not None else service.stored_job(job_id)
    if record is None:
        raise _no_job(job_id)
    return web.json_response(record)


async def backends_init_output(request: web.Request) -> web.Response:
    job_id = _job_id(request)
    after = query_int(request.query, "after_sequence", 0, 0, 2**62)
    limit = max(1, query_int(request.query, "limit", 200, 0, _MAX_PAGE))
    service = request.app[BACKEND_SETUP]
    job = service.job(job_id)
    if job is not None:
        record = job.record()
        chunks = job.chunks
    else:
        stored = service.stored_job(job_id)
        if stored is None:
            raise _no_job(job_id)
        record, chunks = stored, await asyncio.to_thread(service.stored_chunks, job_id)
    finished = record.get("ended_at") is not None
    truncated = bool(record.get("output_truncated"))
    return web.json_response(output_page(job_id, chunks, truncated, finished, after, limit))


async def backends_init_events(request: web.Request) -> web.StreamResponse:
    job_id = _job_id(request)
    service = request.app[BACKEND_SETUP]
    job = service.job(job_id)
    stored = service.stored_job(job_id) if job is None else None
    if job is None and stored is None:
        raise _no_job(job_id)
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    if job is None:  # a job of an earlier router run: its final state, once
        await response.write(
            encode_event({"event": "backend_init", **(stored or {})}, "backend_init")
        )
        return response
    async with ended_at_deadline(request.app[INFLIGHT], response):  # R27
        await _follow(response, job)
    return response


async def _follow(response: web.StreamResponse, job: SetupJob) -> None:
    """Every event of the job from the first, then live ones until it ends."""
    sent = 0
    while True:
        changed = job.changed  # taken before reading, so an event in between is not missed
        while sent < len(job.events):
            await response.write(encode_event(job.events[sent], "backend_init"))
            sent += 1
        if job.done:
            return
        try:
            await asyncio.wait_for(changed.wait(), SSE_HEARTBEAT)
        except TimeoutError:
            await response.write(b": keep-alive\n\n")


async def launch_options(request: web.Request) -> web.Response:
    node_id = addressed_node(request)
    backend_id = check_backend(request.query.get("backend_id"))
    options = request.app[LAUNCH_OPTIONS]
    return web.json_response(
        {
            "node_id": node_id,
            "backend_id": backend_id,
            "options": options.current(),
            "defaults": options.defaults,
            "persisted": options.persisted,
        }
    )


async def launch_options_set(request: web.Request) -> web.Response:
    body = await read_json(request, required=True)
    node_id = addressed_node(request)
    backend_id = check_backend(body.get("backend_id"))
    changes = parse_options(body.get("options"))
    options = request.app[LAUNCH_OPTIONS]
    changed = options.update(changes)  # a small file; no await between read and write
    unloaded: list[str] = []
    if changed:  # a running vLLM keeps its environment: the next load applies the change
        manager = request.app[RUNTIMES]
        unloaded = await asyncio.shield(manager.unload(frozenset(Lane), family=Family.VLLM))
    return web.json_response(
        {
            "node_id": node_id,
            "backend_id": backend_id,
            "options": options.current(),
            "changed": changed,
            "unloaded": unloaded,
        }
    )


HANDLERS: dict[str, Handler] = {
    "site.backends_init": backends_init,
    "site.backends_init_cancel": backends_init_cancel,
    "site.backends_init_status": backends_init_status,
    "site.backends_init_job": backends_init_job,
    "site.backends_init_output": backends_init_output,
    "site.backends_init_events": backends_init_events,
    "site.launch_options": launch_options,
    "site.launch_options_set": launch_options_set,
}
