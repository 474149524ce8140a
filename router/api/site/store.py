"""Site routes backed by the node's store: analytics, load captures, load errors, download.

The node a call names is resolved before these handlers run (their rows declare `names_node`,
router/classify/table.py): one other node named is relayed there by a master's dispatcher and a 404
elsewhere (never an address to contact), so a handler here answers for this node only. A
master's merge over every node belongs to the cluster layer (router/api/node FANOUT); the
response shapes here already carry the per-node `persisted` / `cleared` / `failed` lists.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sqlite3
import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from router.appkeys import STORE
from router.edge import addressed_node, match_of, node_filter, query_int, refuse_addresses
from router.errors import BadRequest, NotFound, ServiceUnavailable, sanitize
from router.store import CaptureFilter, LoadAttempts, Store
from router.store.ranges import RANGES

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 86400.0
MAX_BUCKETS = 10_000
DOWNLOAD_CHUNK = 256 * 1024


def _store(request: web.Request) -> Store:
    """This node's store; every route here calls it first, so it also refuses addresses."""
    refuse_addresses(request)
    store = request.app.get(STORE)
    if store is None:
        raise ServiceUnavailable("the router's store is not open")
    return store


def _path_param(request: web.Request, name: str) -> str:
    """A parameter of the route table's match (app.py's dispatcher classified the request)."""
    value = match_of(request).params.get(name)
    if not value:
        raise NotFound(f"missing path parameter {name}")
    return str(value)


def parse_time(raw: str, name: str) -> float:
    """Unix seconds (`1700000000`, `1700000000.5`) or ISO-8601 (naive means UTC)."""
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise BadRequest(f"{name} must be a finite number", param=name)
        return value
    try:
        parsed = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise BadRequest(f"{name} must be unix seconds or ISO-8601", param=name) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _time(request: web.Request, name: str) -> float | None:
    raw = request.query.get(name)
    return None if raw is None or raw == "" else parse_time(raw, name)


def _nodes(request: web.Request, store: Store) -> list[str]:
    """Repeated `node` / `node_id` filters (a FILTER row: the dispatcher relayed one other node
    or refused an unknown one). Several nodes reach a handler only where no merge covers them."""
    nodes = node_filter(request)
    if any(n != store.node_id for n in nodes):
        raise BadRequest(
            "name one node at a time; merging several nodes' rows is not built yet",
            param="node_id",
        )
    return nodes


async def analytics(request: web.Request) -> web.Response:
    store = _store(request)
    nodes = _nodes(request, store)
    if "range" in request.query:
        return await _analytics_range(request, store, nodes)
    to_ts = _time(request, "to")
    to_ts = time.time() if to_ts is None else to_ts
    from_ts = _time(request, "from")
    from_ts = to_ts - DEFAULT_WINDOW if from_ts is None else from_ts
    if from_ts >= to_ts:
        raise BadRequest("from must be earlier than to", param="from")
    bucket = query_int(request.query, "bucket_seconds", 3600, 60, 31 * 86400)
    if (to_ts - from_ts) / bucket > MAX_BUCKETS:
        raise BadRequest(
            f"more than {MAX_BUCKETS} buckets; widen bucket_seconds", param="bucket_seconds"
        )
    model = request.query.get("model") or None
    summary = await store.summary(from_ts, to_ts, model=model, node=nodes, bucket_seconds=bucket)
    return web.json_response({"nodes": [store.node_id], **summary})


async def _analytics_range(request: web.Request, store: Store, nodes: list[str]) -> web.Response:
    """`?range=1h|24h|7d|30d` (optional `to` anchors it; default now): the WebUI's one call."""
    name = request.query["range"]
    if name not in RANGES:
        raise BadRequest(f"range must be one of {', '.join(RANGES)}", param="range")
    for clash in ("from", "bucket_seconds"):
        if clash in request.query:
            raise BadRequest(f"range picks the window and buckets; drop {clash}", param=clash)
    model = request.query.get("model") or None
    summary = await store.range_summary(name, model, nodes, _time(request, "to"))
    return web.json_response({"nodes": [store.node_id], **summary})


async def analytics_flush(request: web.Request) -> web.Response:
    store = _store(request)
    _nodes(request, store)  # a filter naming another node was relayed there
    try:
        written = await store.flush()
    except sqlite3.Error as exc:
        log.error("analytics flush failed: %s", exc)
        failed = [{"node_id": store.node_id, "error": sanitize(str(exc))}]
        return web.json_response({"persisted": [], "failed": failed})
    log.debug("analytics flush wrote %d events", written)
    return web.json_response({"persisted": [store.node_id], "failed": []})


async def load_captures(request: web.Request) -> web.Response:
    store = _store(request)
    kind = request.query.get("kind") or None
    if kind not in (None, "load", "reuse"):
        raise BadRequest("kind must be load or reuse", param="kind")
    filters = CaptureFilter(
        nodes=_nodes(request, store),
        status=request.query.get("status") or None,
        kind=kind,
        backend=request.query.get("backend") or None,
        from_ts=_time(request, "from"),
        to_ts=_time(request, "to"),
        limit=query_int(request.query, "limit", 50, 1, 500),
        cursor=request.query.get("cursor") or None,
    )
    page = await store.load_attempts.page(filters)
    body = {"enabled": store.load_attempts.enabled, "nodes": [store.node_id], **page}
    return web.json_response(body)


def _capture(request: web.Request) -> tuple[LoadAttempts, str]:
    """The load captures of this node and the attempt the path names."""
    store = _store(request)
    _nodes(request, store)
    return store.load_attempts, _path_param(request, "attempt_id")


def _found(attempt_id: str, answer: dict[str, Any] | None) -> web.Response:
    if answer is None:
        raise NotFound(f"no load capture {attempt_id!r}")
    return web.json_response(answer)


async def load_capture(request: web.Request) -> web.Response:
    captures, attempt_id = _capture(request)
    return _found(attempt_id, await captures.detail(attempt_id))


async def load_capture_output(request: web.Request) -> web.Response:
    captures, attempt_id = _capture(request)
    after = query_int(request.query, "after_sequence", 0, 0, 2**62)
    limit = query_int(request.query, "limit", 200, 1, 1000)
    return _found(attempt_id, await captures.output_page(attempt_id, after, limit))


async def load_errors(request: web.Request) -> web.Response:
    """GET lists the newest load errors; DELETE removes them all."""
    store = _store(request)
    _nodes(request, store)
    if request.method == "DELETE":
        removed = await store.load_errors.clear()
        return web.json_response({"removed": removed, "cleared": [store.node_id], "failed": []})
    limit = query_int(request.query, "limit", 100, 1, 1000)
    errors = await store.load_errors.rows(limit)
    return web.json_response({"nodes": [store.node_id], "errors": errors})


async def store_download(request: web.Request) -> web.StreamResponse:
    store = _store(request)
    node_id = addressed_node(request)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    copy = await store.download_copy()
    try:
        handle = await asyncio.to_thread(copy.open, "rb")
    finally:
        # Unlinked while open: the bytes stay readable through `handle` and no copy survives
        # a client that disconnects or a router that dies mid-download.
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(os.unlink, copy)
    try:
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/vnd.sqlite3",
                "Content-Disposition": f'attachment; filename="analytics-{node_id}-{stamp}.sqlite"',
                "Cache-Control": "no-store",
            }
        )
        response.content_length = os.fstat(handle.fileno()).st_size
        await response.prepare(request)
        while chunk := await asyncio.to_thread(handle.read, DOWNLOAD_CHUNK):
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        await asyncio.to_thread(handle.close)


HANDLERS = {
    "site.analytics": analytics,
    "site.analytics_flush": analytics_flush,
    "site.load_captures": load_captures,
    "site.load_capture": load_capture,
    "site.load_capture_output": load_capture_output,
    "site.load_errors": load_errors,
    "site.load_errors_clear": load_errors,  # the route table names the DELETE route apart
    "site.store_download": store_download,
}
