"""Responses affinity: `/v1/responses/{id}` calls go to the runtime that created the response.

A stored response lives only in the backend process that answered `POST /v1/responses`, so a
later GET, DELETE or cancel sent to "whatever runtime serves the lane" would reach a process
that never heard of the id (or load another model to ask it). The router watches the first
bytes of every `POST /v1/responses` answer for the response id (the top-level `id` of a JSON
body, or `response.id` of the `response.created` SSE event) and remembers which runtime
object produced it. Follow-up calls are forwarded to that runtime whatever model they name;
an unknown id, or one whose runtime has since stopped, is a 404 in the OpenAI shape without
touching any backend. The table lives as long as the RuntimeManager, is bounded, and is lost
on restart (as the backend's own in-memory store is).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from functools import partial

from aiohttp import web

from router.appkeys import CLUSTER, RUNTIMES, SETTINGS
from router.domain import MiB
from router.edge import Handler, match_of, matched_route
from router.errors import NotFound
from router.forwarding import ModelRewriter, Selection, read_selector
from router.inference import (
    IdWatcher,
    OnLease,
    Override,
    Pins,
    WatchingRewriter,
    followed,
    forward,
)
from router.runtime import Lease, Runtime, RuntimeManager

MAX_REMEMBERED = 10_000
PIN = "response:"


class ResponseTable:
    """response id -> (runtime, public model id), oldest forgotten first."""

    def __init__(self, manager: RuntimeManager, limit: int = MAX_REMEMBERED) -> None:
        self._manager = manager
        self._limit = limit
        self._owners: OrderedDict[str, tuple[Runtime, str]] = OrderedDict()

    def remember(self, response_id: str, runtime: Runtime, public_id: str) -> None:
        self._owners[response_id] = (runtime, public_id)
        self._owners.move_to_end(response_id)
        while len(self._owners) > self._limit:
            self._owners.popitem(last=False)

    def forget(self, response_id: str) -> None:
        self._owners.pop(response_id, None)

    def owner(self, response_id: str) -> tuple[Runtime, str] | None:
        """The live runtime that made `response_id`; a stopped one is forgotten here."""
        found = self._owners.get(response_id)
        if found is None:
            return None
        if not self.alive(found[0]):
            self.forget(response_id)
            return None
        return found

    def alive(self, runtime: Runtime) -> bool:
        # A draining runtime is about to stop: leasing it would queue behind the swap and then
        # load the model afresh, in a process that never saw the id.
        return self._manager.is_serving(runtime, new_work=True)


RESPONSES: web.AppKey[ResponseTable] = web.AppKey("responses", ResponseTable)


async def responses_context(app: web.Application) -> AsyncIterator[None]:
    """The app's response table (after the runtimes it points at); it lives as long as the app."""
    app[RESPONSES] = ResponseTable(app[RUNTIMES])
    yield


# ---- handlers -----------------------------------------------------------------------------


async def _selection(request: web.Request) -> Selection:
    scan_limit = int(request.app[SETTINGS].limits.selector_scan_mb * MiB)
    return await read_selector(request, matched_route(request), scan_limit)


async def create(request: web.Request) -> web.StreamResponse:
    """POST /v1/responses: forwarded as usual, remembering which runtime answered."""
    table = request.app[RESPONSES]

    def watch(lease: Lease, rewriter: ModelRewriter) -> ModelRewriter:
        runtime = lease.runtime
        watcher = IdWatcher(lambda rid: table.remember(rid, runtime, rewriter.public))
        return WatchingRewriter(rewriter, watcher)

    # Relayed to another cluster node, the id it answers with is pinned to that node.
    return await forward(
        request,
        Override(await _selection(request), on_lease=OnLease(watch), pins=Pins(remember=PIN)),
    )


async def _follow_remote(request: web.Request, response_id: str) -> web.StreamResponse | None:
    """A follow-up for a response another node made: to that node, as sent."""
    response = await followed(request, PIN + response_id, "response", partial(_selection, request))
    if response is None:
        return None
    if request.method == "DELETE" and 200 <= response.status < 300:
        request.app[CLUSTER].unpin(PIN + response_id)
    return response


async def follow(request: web.Request) -> web.StreamResponse:
    """GET / DELETE /v1/responses/{id} and POST .../cancel: to the runtime that made it."""
    response_id = match_of(request).params["id"]
    table = request.app[RESPONSES]
    owner = table.owner(response_id)
    if owner is None:
        remote = await _follow_remote(request, response_id)
        if remote is None:
            raise _unknown(response_id)
        return remote
    runtime, public_id = owner
    read = await _selection(request)

    def same_runtime(lease: Lease, rewriter: ModelRewriter) -> ModelRewriter:
        # A swap between the lookup and the lease started another process: it has no such id.
        if lease.runtime is not runtime:
            table.forget(response_id)
            raise _unknown(response_id)
        return rewriter

    selection = Selection(public_id, read.prefix, read.complete, "response")
    response = await forward(request, Override(selection, on_lease=OnLease(same_runtime)))
    if request.method == "DELETE" and 200 <= response.status < 300:
        table.forget(response_id)
    return response


def _unknown(response_id: str) -> NotFound:
    return NotFound(
        f"no response with id {json.dumps(response_id[:128])} on any running model "
        "(responses live in the backend that created them, until it stops)",
        code="response_not_found",
        param="response_id",
    )


HANDLERS: dict[str, Handler] = {"responses.create": create, "responses.follow": follow}
