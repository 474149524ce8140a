"""`/router/v1/site/download/...` (admin): Hugging Face search, repository, plan, jobs
with server-sent progress, the library (docs/downloads.md). One route-table row per action
(router/classify/table.py); every action takes `node_id` (default this node).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from router.appkeys import DOWNLOADS, INFLIGHT, SETTINGS, STORE
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
from router.edge import SSE_HEADERS, Handler, addressed_node, match_of, read_json
from router.edge.inflight import ended_at_deadline
from router.errors import BadRequest, ServiceUnavailable
from router.forwarding import encode_event

SSE_HEARTBEAT = 15.0
Action = Callable[[web.Request, Downloads, dict[str, Any]], Awaitable[web.StreamResponse]]


def downloads_of(request: web.Request) -> Downloads:
    """The download service, or 503 `downloads_disabled` when downloads are off (every site
    route that downloads asks here)."""
    service = request.app.get(DOWNLOADS)
    if service is None:
        raise ServiceUnavailable(
            "downloads are off (downloads.enabled: false)", code="downloads_disabled"
        )
    return service


async def capabilities(request: web.Request) -> web.StreamResponse:
    node_id = addressed_node(request)
    settings = request.app[SETTINGS]
    service = request.app.get(DOWNLOADS)
    capability: dict[str, Any] = {
        "enabled": service is not None,
        "endpoint": settings.downloads.endpoint,
        "configured_token": settings.downloads.token is not None,
    }
    if service is None:
        capability.update(reachable=False, reason="downloads.enabled is false")
    else:
        reachable, reason = await asyncio.to_thread(service.hub.reachable)
        capability.update(reachable=reachable, reason=reason)
    node = {"node_id": node_id, "available": True, "capability": capability}
    return web.json_response({"nodes": [node]})


async def search(
    request: web.Request, service: Downloads, body: dict[str, Any]
) -> web.StreamResponse:
    query = search_query(body)
    return web.json_response(await asyncio.to_thread(service.hub.search, query))


async def repository(
    request: web.Request, service: Downloads, body: dict[str, Any]
) -> web.StreamResponse:
    repo_id, revision = repository_of(body)
    repo = await service.repository(repo_id, revision)
    return web.json_response(repo.to_json(revision))


async def plan(
    request: web.Request, service: Downloads, body: dict[str, Any]
) -> web.StreamResponse:
    made = await _plan(service, body)
    return web.json_response(made.to_json())


async def _plan(service: Downloads, body: dict[str, Any]) -> Any:
    repo_id, revision, files, mode = plan_request(body)
    try:
        return await service.plan(repo_id, revision, files, mode)
    except UnsafeName as exc:
        raise BadRequest(str(exc), param="files") from None


async def start_job(
    request: web.Request, service: Downloads, body: dict[str, Any]
) -> web.StreamResponse:
    confirm_replace, confirm_unsafe = flag(body, "confirm_replace"), flag(body, "confirm_unsafe")
    made = await _plan(service, body)
    job = await service.start_job(
        made, confirm_replace=confirm_replace, confirm_unsafe=confirm_unsafe
    )
    return web.json_response(job.to_json(), status=202)


async def library(
    request: web.Request, service: Downloads, body: dict[str, Any]
) -> web.StreamResponse:
    return web.json_response(await service.library())


async def rescan(
    request: web.Request, service: Downloads, body: dict[str, Any]
) -> web.StreamResponse:
    return web.json_response(await service.rescan())


def _posted(action: Action) -> Handler:
    """A POST action: its JSON body (may be empty), the node it names, the service."""

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        addressed_node(request)
        return await action(request, downloads_of(request), body)

    return handler


async def library_route(request: web.Request) -> web.StreamResponse:
    addressed_node(request)
    return await library(request, downloads_of(request), {})


async def job_route(request: web.Request) -> web.StreamResponse:
    service = downloads_of(request)
    addressed_node(request)
    return web.json_response(service.get(match_of(request).params["job_id"]).to_json())


async def events_route(request: web.Request) -> web.StreamResponse:
    service = downloads_of(request)
    addressed_node(request)
    return await events(request, service.get(match_of(request).params["job_id"]))


def _job_action(name: str) -> Handler:
    """pause, resume or cancel the job named in the path."""

    async def handler(request: web.Request) -> web.StreamResponse:
        service = downloads_of(request)
        addressed_node(request)
        job = await getattr(service, name)(match_of(request).params["job_id"])
        return web.json_response(job.to_json())

    return handler


async def events(request: web.Request, job: Job) -> web.StreamResponse:
    """Server-sent events: what happened so far (after Last-Event-ID), then live, until the
    job ends or pauses; comments keep idle proxies from closing the stream."""
    after = _last_event_id(request)
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    if request.method == "HEAD":
        return response
    # At the graceful stop's deadline the stream ends with an error event (R27).
    async with ended_at_deadline(request.app[INFLIGHT], response):
        await _follow(response, job, after)
    return response


async def _follow(response: web.StreamResponse, job: Job, after: int) -> None:
    while True:
        changed = job.changed
        pending = [e for e in list(job.events) if e["id"] > after]
        for event in pending:
            await response.write(encode_event(event, event["event"], event_id=str(event["id"])))
            after = event["id"]
        if (
            pending
            and pending[-1]["event"] == "state"
            and pending[-1]["state"] in ("completed", "failed", "cancelled", "paused")
        ):
            return
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


async def downloads_context(app: web.Application) -> AsyncIterator[None]:
    """After the store (jobs and the library live there); off means no service at all."""
    settings = app[SETTINGS]
    if not settings.downloads.enabled:
        yield
        return
    folder = settings.downloads.dir or _data_dir(app) / "downloads"
    async with downloads_service(
        settings.downloads, folder, app[STORE], settings.cluster.node_id
    ) as service:
        app[DOWNLOADS] = service
        yield


def _data_dir(app: web.Application) -> Any:
    return app[STORE].path.parent


HANDLERS: dict[str, Handler] = {
    "site.download_capabilities": capabilities,
    "site.download_search": _posted(search),
    "site.download_repository": _posted(repository),
    "site.download_plan": _posted(plan),
    "site.download_rescan": _posted(rescan),
    "site.download_library": library_route,
    "site.download_start": _posted(start_job),
    "site.download_job": job_route,
    "site.download_events": events_route,
    "site.download_pause": _job_action("pause"),
    "site.download_resume": _job_action("resume"),
    "site.download_cancel": _job_action("cancel"),
}
