"""`/router/v1/site/download/{tail}` (admin): Hugging Face search, repository, plan, jobs
with server-sent progress, the library (docs/downloads.md). One route-table row; `tail` picks
the action. Every action takes `node_id` (default this node).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from router.api.common import Handler, match_of, node_of, read_control_json
from router.appkeys import DOWNLOADS, SETTINGS, STORE
from router.downloads import (
    Downloads,
    Job,
    UnsafeName,
    downloads_service,
    flag,
    plan_request,
    repository_of,
    search_query,
)
from router.errors import BadRequest, MethodNotAllowed, NotFound, ServiceUnavailable
from router.forwarding import encode_event

SSE_HEARTBEAT = 15.0
Action = Callable[[web.Request, Downloads, dict[str, Any]], Awaitable[web.StreamResponse]]


def _service(request: web.Request) -> Downloads:
    service = request.app.get(DOWNLOADS)
    if service is None:
        raise ServiceUnavailable("downloads are off (downloads.enabled: false)", code="downloads_disabled")  # fmt: skip
    return service


async def capabilities(request: web.Request) -> web.StreamResponse:
    node_id = node_of(request)
    settings = request.app[SETTINGS]
    service = request.app.get(DOWNLOADS)
    capability: dict[str, Any] = {"enabled": service is not None, "endpoint": settings.downloads.endpoint,  # fmt: skip
                                  "configured_token": settings.downloads.token is not None}  # fmt: skip
    if service is None:
        capability.update(reachable=False, reason="downloads.enabled is false")
    else:
        reachable, reason = await asyncio.to_thread(service.hub.reachable)
        capability.update(reachable=reachable, reason=reason)
    node = {"node_id": node_id, "available": True, "capability": capability}
    return web.json_response({"nodes": [node]})


async def search(request: web.Request, service: Downloads, body: dict[str, Any]) -> web.StreamResponse:  # fmt: skip
    query = search_query(body)
    return web.json_response(await asyncio.to_thread(service.hub.search, query))


async def repository(request: web.Request, service: Downloads, body: dict[str, Any]) -> web.StreamResponse:  # fmt: skip
    repo_id, revision = repository_of(body)
    repo = await service.repository(repo_id, revision)
    return web.json_response(repo.to_json(revision))


async def plan(request: web.Request, service: Downloads, body: dict[str, Any]) -> web.StreamResponse:  # fmt: skip
    made = await _plan(service, body)
    return web.json_response(made.to_json())


async def _plan(service: Downloads, body: dict[str, Any]) -> Any:
    repo_id, revision, files, mode = plan_request(body)
    try:
        return await service.plan(repo_id, revision, files, mode)
    except UnsafeName as exc:
        raise BadRequest(str(exc), param="files") from None


async def start_job(request: web.Request, service: Downloads, body: dict[str, Any]) -> web.StreamResponse:  # fmt: skip
    confirm_replace, confirm_unsafe = flag(body, "confirm_replace"), flag(body, "confirm_unsafe")
    made = await _plan(service, body)
    job = await service.start_job(made, confirm_replace=confirm_replace, confirm_unsafe=confirm_unsafe)  # fmt: skip
    return web.json_response(job.to_json(), status=202)


async def library(request: web.Request, service: Downloads, body: dict[str, Any]) -> web.StreamResponse:  # fmt: skip
    return web.json_response(await service.library())


async def rescan(request: web.Request, service: Downloads, body: dict[str, Any]) -> web.StreamResponse:  # fmt: skip
    return web.json_response(await service.rescan())


_POSTS: dict[str, Action] = {
    "search": search, "search-page": search, "repository": repository, "plan": plan,
    "jobs": start_job, "rescan": rescan,
}  # fmt: skip
_GETS: dict[str, Action] = {"library": library}
_JOB_ACTIONS = {"pause": "pause", "resume": "resume", "cancel": "cancel"}


async def job_route(request: web.Request, service: Downloads, parts: list[str]) -> web.StreamResponse:  # fmt: skip
    if len(parts) == 2:
        _only(request, "GET")
        node_of(request)
        return web.json_response(service.get(parts[1]).to_json())
    if len(parts) == 3 and parts[2] == "events":
        _only(request, "GET")
        node_of(request)
        return await events(request, service.get(parts[1]))
    if len(parts) == 3 and parts[2] in _JOB_ACTIONS:
        _only(request, "POST")
        node_of(request, await read_control_json(request))
        job = await getattr(service, _JOB_ACTIONS[parts[2]])(parts[1])
        return web.json_response(job.to_json())
    raise NotFound(f"no download route {'/'.join(parts)[:80]!r}")


def _only(request: web.Request, method: str) -> None:
    allowed = {method, "HEAD"} if method == "GET" else {method}
    if request.method not in allowed:
        raise MethodNotAllowed(request.method, allowed)


async def events(request: web.Request, job: Job) -> web.StreamResponse:
    """Server-sent events: what happened so far (after Last-Event-ID), then live, until the
    job ends or pauses; comments keep idle proxies from closing the stream."""
    after = _last_event_id(request)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})  # fmt: skip
    await response.prepare(request)
    if request.method == "HEAD":
        return response
    while True:
        changed = job.changed
        pending = [e for e in list(job.events) if e["id"] > after]
        for event in pending:
            await response.write(encode_event(event, event["event"], event_id=str(event["id"])))
            after = event["id"]
        if pending and pending[-1]["event"] == "state" and pending[-1]["state"] in ("completed", "failed", "cancelled", "paused"):  # fmt: skip
            return response
        try:
            await asyncio.wait_for(changed.wait(), SSE_HEARTBEAT)
        except TimeoutError:
            await response.write(b": keep-alive\n\n")


def _last_event_id(request: web.Request) -> int:
    raw = request.headers.get("Last-Event-ID") or request.query.get("after") or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        raise BadRequest("Last-Event-ID must be an event id", param="Last-Event-ID") from None


async def dispatch(request: web.Request) -> web.StreamResponse:
    tail = match_of(request).params.get("tail", "")
    if tail in ("", "capabilities"):  # the bare path answers what the node can do
        _only(request, "GET")
        return await capabilities(request)
    parts = tail.split("/")
    if parts[0] == "jobs" and len(parts) > 1:
        return await job_route(request, _service(request), parts)
    if tail in _POSTS:
        _only(request, "POST")
        body = await read_control_json(request)
        node_of(request, body)
        return await _POSTS[tail](request, _service(request), body)
    if tail in _GETS:
        _only(request, "GET")
        node_of(request)
        return await _GETS[tail](request, _service(request), {})
    known = ", ".join(["capabilities", *_POSTS, *_GETS, "jobs/{id}[/events|pause|resume|cancel]"])
    raise NotFound(f"no download route {tail[:64]!r}; known: {known}")


async def downloads_context(app: web.Application) -> AsyncIterator[None]:
    """After the store (jobs and the library live there); off means no service at all."""
    settings = app[SETTINGS]
    if not settings.downloads.enabled:
        yield
        return
    folder = settings.downloads.dir or _data_dir(app) / "downloads"
    async with downloads_service(settings.downloads, folder, app[STORE], settings.cluster.node_id) as service:  # fmt: skip
        app[DOWNLOADS] = service
        yield


def _data_dir(app: web.Application) -> Any:
    return app[STORE].path.parent


HANDLERS: dict[str, Handler] = {"site.download": dispatch}
