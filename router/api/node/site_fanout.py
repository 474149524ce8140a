"""The master's site calls that cover every node at once: analytics flush and load errors.

Without a `node_id` / `node` filter the master answers for the whole cluster: its own result,
then every registered slave's over its node path (`classify.node_path`), merged, with the nodes that
answered and the ones that did not (`failed`, with the reason). A slave that is down never
fails the call; it is listed in `failed`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from router.appkeys import CLUSTER
from router.classify import node_path
from router.cluster import NodeEntry
from router.edge import Handler, node_filter, query_int
from router.errors import NotFound, RouterError
from router.store.captures import encode_cursor

_FILTERS = ("node", "node_id")
# The load-captures page size, as the node's own route takes it (router/api/site_store.py).
CAPTURES_LIMIT, MAX_CAPTURES_LIMIT = 50, 500


def _whole_cluster(request: web.Request) -> bool:
    return not any(name in request.query for name in _FILTERS)


async def _local(handler: Handler, request: web.Request) -> dict[str, Any]:
    response = await handler(request)
    assert isinstance(response, web.Response) and isinstance(response.body, bytes)
    body: dict[str, Any] = json.loads(response.body)
    return body


async def _each_slave(
    request: web.Request, method: str, path: str
) -> list[tuple[NodeEntry, dict[str, Any] | str]]:
    service = request.app[CLUSTER]
    entries = [e for e in service.registry.nodes() if e.node_id]
    query = "?" + request.query_string if request.query_string else ""

    async def one(entry: NodeEntry) -> dict[str, Any] | str:
        try:
            return await service.client.call(method, entry.node_url, path + query)
        except RouterError as err:
            return err.message

    answers = await asyncio.gather(*(one(e) for e in entries))
    return list(zip(entries, answers, strict=True))


def _merged(
    merge: Callable[[web.Request, dict[str, Any], list[Any]], dict[str, Any]],
    method: str,
    path: str,
) -> Callable[[Handler], Handler]:
    def wrap(handler: Handler) -> Handler:
        async def site(request: web.Request) -> web.StreamResponse:
            if not _whole_cluster(request):
                return await handler(request)
            own = await _local(handler, request)
            slaves = await _each_slave(request, method, path)
            return web.json_response(merge(request, own, slaves))

        return site

    return wrap


def _failed(slaves: list[tuple[NodeEntry, dict[str, Any] | str]]) -> list[dict[str, Any]]:
    return [{"node_id": e.node_id, "error": a} for e, a in slaves if isinstance(a, str)]


def _flush(request: web.Request, own: dict[str, Any], slaves: list[Any]) -> dict[str, Any]:
    persisted, failed = list(own.get("persisted", [])), list(own.get("failed", []))
    for _, answer in slaves:
        if isinstance(answer, dict):
            persisted += answer.get("persisted", [])
            failed += answer.get("failed", [])
    return {"persisted": persisted, "failed": failed + _failed(slaves)}


def _errors(request: web.Request, own: dict[str, Any], slaves: list[Any]) -> dict[str, Any]:
    own_id = request.app[CLUSTER].registry.own_node
    rows = [{"node_id": own_id, **row} for row in own.get("errors", [])]
    nodes = [own_id]
    for entry, answer in slaves:
        if isinstance(answer, dict):
            nodes.append(entry.node_id)
            rows += [{"node_id": entry.node_id, **row} for row in answer.get("errors", [])]
    rows.sort(key=lambda row: row.get("time") or 0, reverse=True)
    return {"nodes": nodes, "errors": rows, "failed": _failed(slaves)}


def _cleared(request: web.Request, own: dict[str, Any], slaves: list[Any]) -> dict[str, Any]:
    removed, cleared = int(own.get("removed", 0)), list(own.get("cleared", []))
    failed = list(own.get("failed", []))
    for _, answer in slaves:
        if isinstance(answer, dict):
            removed += int(answer.get("removed", 0))
            cleared += answer.get("cleared", [])
            failed += answer.get("failed", [])
    return {"removed": removed, "cleared": cleared, "failed": failed + _failed(slaves)}


def _captures(handler: Handler) -> Handler:
    """`GET site/load-captures` with no `node` filter (every node) or several: each node's page
    under the same filters and the same cursor, merged newest first to `limit`. Every node
    orders its rows on (started_at, id), so one cursor (the last merged row's key) pages the
    merged listing: `next_cursor` goes on across every node. `cursors` (each node's own next
    cursor) stays for callers that page one node."""

    async def site(request: web.Request) -> web.StreamResponse:
        service = request.app[CLUSTER]
        own = service.registry.own_node
        asked = set(node_filter(request))
        known = {own, *(e.node_id for e in service.registry.nodes() if e.node_id)}
        targets = asked or known
        if targets <= {own} or len(known) == 1:
            return await handler(request)
        unknown = sorted(targets - known)
        if unknown:
            raise NotFound(f"unknown node {unknown[0][:64]!r}", param="node")
        # Checked before any node is asked: a bad limit is this request's 400, not a 500.
        limit = query_int(request.query, "limit", CAPTURES_LIMIT, 1, MAX_CAPTURES_LIMIT)
        pages, failed = await _pages(request, handler, own, sorted(targets))
        rows, next_cursor = merge_capture_pages(list(pages.values()), limit)
        body = {
            "enabled": any(page.get("enabled") for page in pages.values()),
            "nodes": sorted(pages),
            "captures": rows,
            "next_cursor": next_cursor,
            "cursors": {node: page.get("next_cursor") for node, page in pages.items()},
            "failed": failed,
        }
        return web.json_response(body)

    return site


async def _pages(
    request: web.Request, handler: Handler, own: str, nodes: list[str]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    service = request.app[CLUSTER]
    base = [(k, v) for k, v in request.query.items() if k not in ("node", "node_id")]
    pages: dict[str, dict[str, Any]] = {}
    failed: list[dict[str, Any]] = []
    for node in nodes:
        query = [*base, ("node", node)]
        if node == own:
            local = request.clone(rel_url=request.rel_url.with_query(query))
            pages[node] = await _local(handler, local)
            continue
        entry = service.registry.node(node)
        assert entry is not None
        path = node_path("/router/v1/site/load-captures") + "?" + urlencode(query)
        try:
            pages[node] = await service.client.call("GET", entry.node_url, path)
        except RouterError as err:
            failed.append({"node_id": node, "error": err.message})
    return pages, failed


def merge_capture_pages(
    pages: list[dict[str, Any]], limit: int
) -> tuple[list[dict[str, Any]], str | None]:
    """Newest `limit` rows of several nodes' pages (each already after the same cursor) and the
    cursor after the last of them, or None when no node has more."""
    rows = sorted(
        (row for page in pages for row in page.get("captures", [])),
        key=lambda row: (row.get("started_at") or 0.0, str(row.get("id", ""))),
        reverse=True,
    )
    more = len(rows) > limit or any(page.get("next_cursor") for page in pages)
    rows = rows[:limit]
    if not more or not rows:
        return rows, None
    last = rows[-1]
    return rows, encode_cursor(float(last.get("started_at") or 0.0), str(last.get("id", "")))


def _analytics(request: web.Request, own: dict[str, Any], slaves: list[Any]) -> dict[str, Any]:
    """This node's summary as before, plus every node's own summary under `per_node`.

    Percentiles cannot be added across nodes, so nothing is summed into a false cluster-wide
    p95: the WebUI and scripts read each node's numbers side by side.
    """
    own_id = request.app[CLUSTER].registry.own_node
    per_node = {own_id: {k: v for k, v in own.items() if k != "nodes"}}
    for entry, answer in slaves:
        if isinstance(answer, dict):
            per_node[entry.node_id] = {k: v for k, v in answer.items() if k != "nodes"}
    return {**own, "nodes": sorted(per_node), "per_node": per_node, "failed": _failed(slaves)}


FANOUT: dict[str, Callable[[Handler], Handler]] = {
    "site.analytics": _merged(_analytics, "GET", node_path("/router/v1/site/analytics")),
    "site.load_captures": _captures,
    "site.analytics_flush": _merged(_flush, "POST", node_path("/router/v1/site/analytics/flush")),
    "site.load_errors": _merged(_errors, "GET", node_path("/router/v1/site/load-errors")),
    "site.load_errors_clear": _merged(_cleared, "DELETE", node_path("/router/v1/site/load-errors")),
}
