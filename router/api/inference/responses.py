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
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from router.api.inference.forward import Override, forward
from router.api.node import remote_target, target_on
from router.appkeys import CLUSTER, RUNTIMES, SETTINGS
from router.cluster import Target
from router.domain import MiB
from router.edge import Handler, match_of, matched_route
from router.errors import NotFound
from router.forwarding import ModelRewriter, Selection, StreamRewriter, read_selector
from router.runtime import Lease, Runtime, RuntimeManager

MAX_REMEMBERED = 10_000
SCAN_LIMIT = 64 * 1024  # the id comes first; a body that hides it deeper is not followed
_LEADING_ID = re.compile(rb'\s*\{\s*"id"\s*:\s*"([^"\\]{1,256})"')


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


# ---- finding the id in a response ---------------------------------------------------------


class IdWatcher:
    """Scans the first SCAN_LIMIT bytes of a JSON or SSE answer for the response id."""

    def __init__(self, found: Callable[[str], None]) -> None:
        self._found = found
        self._buf = b""
        self.done = False

    def feed(self, chunk: bytes) -> None:
        if self.done or not chunk:
            return
        self._buf += chunk
        response_id = find_response_id(self._buf)
        if response_id is not None:
            self._found(response_id)
        if response_id is not None or len(self._buf) > SCAN_LIMIT:
            self.done, self._buf = True, b""


def find_response_id(data: bytes) -> str | None:
    """The id in a (possibly partial) JSON body or SSE stream; None while not (yet) seen."""
    head = data.lstrip()
    if head.startswith(b"{"):
        leading = _LEADING_ID.match(head)
        if leading is not None:
            return leading.group(1).decode("utf-8", "replace")
        if not head.rstrip().endswith(b"}"):
            return None
        return _id_of(_json(head), nested=False)
    for line in data.split(b"\n")[:-1]:  # complete lines only
        if line.startswith(b"data:"):
            found = _id_of(_json(line[5:]), nested=True)
            if found is not None:
                return found
    return None


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _id_of(obj: object, *, nested: bool) -> str | None:
    if not isinstance(obj, dict):
        return None
    if nested:  # {"type": "response.created", "response": {"id": ...}}
        obj = obj.get("response")
        if not isinstance(obj, dict):
            return None
    value = obj.get("id")
    return value if isinstance(value, str) and 0 < len(value) <= 256 else None


class _WatchingStream(StreamRewriter):
    def __init__(self, rewriter: ModelRewriter, watcher: IdWatcher) -> None:
        super().__init__(rewriter)
        self._watcher = watcher

    def feed(self, chunk: bytes) -> bytes:
        self._watcher.feed(chunk)  # before the client can see the id and ask for it
        return super().feed(chunk)


class WatchingRewriter(ModelRewriter):
    """The request's own rewriter, plus a look at the response bytes on either proxy path."""

    def __init__(self, inner: ModelRewriter, watcher: IdWatcher) -> None:
        super().__init__(inner.public, inner.local)
        self._watcher = watcher

    def response_body(self, body: bytes) -> bytes:  # whole-body path (rewritten JSON)
        self._watcher.feed(body)
        return super().response_body(body)

    def stream(self) -> StreamRewriter:
        # A plain rewriter inside, so its own response_body calls are not watched twice.
        return _WatchingStream(ModelRewriter(self.public, self.local), self._watcher)


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

    selection = await _selection(request)
    target = remote_target(request, selection)
    if target is not None:  # another cluster node answers: its id is pinned to that node
        relayed = Override(selection, relay_to=target, relay_watch=pinning(request, target, PIN))
        return await forward(request, relayed)
    return await forward(request, Override(selection, on_lease=watch))


PIN = "response:"


def pinning(
    request: web.Request, target: Target, prefix: str
) -> Callable[[ModelRewriter], ModelRewriter]:
    """A relay watch that pins the id an answer starts with (a stored response, an sd-server
    job) to the node that made it, so its follow-ups go there."""
    service = request.app[CLUSTER]
    node, local = target.replica.node_id, target.replica.local_id

    def watch(rewriter: ModelRewriter) -> ModelRewriter:
        return WatchingRewriter(rewriter, IdWatcher(lambda i: service.pin(prefix + i, node, local)))

    return watch


def pinned_target(request: web.Request, key: str) -> Target | None:
    """On a master, the node a pinned id was made on, as a relay target."""
    if request.app[SETTINGS].cluster.role != "master":
        return None
    service = request.app[CLUSTER]
    pinned = service.pinned(key)
    return target_on(service, *pinned) if pinned else None


async def _follow_remote(request: web.Request, response_id: str) -> web.StreamResponse | None:
    """A follow-up for a response another node made: to that node, as sent."""
    target = pinned_target(request, PIN + response_id)
    if target is None:
        return None
    read = await _selection(request)
    selection = Selection(target.public.public_id, read.prefix, read.complete, "response")
    response = await forward(request, Override(selection, relay_to=target))
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
    response = await forward(request, Override(selection, on_lease=same_runtime))
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
