"""Follow-up ids: finding the id an answer starts with (a stored response, an sd-server job)
and pinning it to the node that made it, so its follow-ups go there (docs/cluster.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from aiohttp import web

from router.appkeys import CLUSTER, SETTINGS
from router.cluster import Target
from router.forwarding import ModelRewriter, StreamRewriter
from router.inference.relay import target_on

SCAN_LIMIT = 64 * 1024  # the id comes first; a body that hides it deeper is not followed
_LEADING_ID = re.compile(rb'\s*\{\s*"id"\s*:\s*"([^"\\]{1,256})"')


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
