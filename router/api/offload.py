"""Lending at request time (docs/lending.md): the owner's side and the helper's side.

Owner (the master, for client traffic): a complete, non-streaming request for a model that
owns links waits in the router while this node already has `cluster.scheduling_backend_depth`
of that model's requests in flight or queued; meanwhile, when `choose_helper` picks a linked
helper, the request goes to the helper's node for the helper's model, buffered, marked
borrowed. A refusal (409 `offload_returned`), an unreachable helper or a helper error puts the
request back on this node: the client never sees any of it.

The helper's side is router/api/borrowed.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from router.api.borrowed import OFFLOAD_HEADER, OFFLOAD_LOAD_HEADER, OFFLOAD_RETURNED
from router.api.relay import node_headers, node_path_qs
from router.appkeys import BORROWED, CLUSTER, LENDING, LINKS, RUNTIMES, SESSION, SETTINGS
from router.cluster import ClusterService, RuntimeStatus
from router.cluster.lending import HelperState, Link, choose_helper
from router.config import ModelConfig
from router.domain import Lane
from router.forwarding import ModelRewriter, ProxyResult, Selection
from router.forwarding.selector import SELECTOR_HEADER

if TYPE_CHECKING:
    from router.api.inference import Override

LENDING_LANES = frozenset({Lane.TEXT, Lane.IMAGE})
# Paths whose follow-ups must find the node that made them (stored responses, sd-server jobs)
# are never lent: only the relay pins them.
_NOT_LENT = ("/v1/responses", "/sdcpp/")
WAIT_STEP_S = 0.05  # how often a held request looks again (cheap: local views, cached status)
STATUS_TTL_S = 0.25  # a helper's status is reused this long by every held request


def lendable(
    request: web.Request, override: Override, config: ModelConfig, lane: Lane
) -> tuple[Link, ...]:
    """The links this request may be lent over (empty: it runs here as usual)."""
    settings = request.app[SETTINGS]
    selection = override.selection
    if (
        settings.cluster.role != "master"
        or lane not in LENDING_LANES
        or not override.plain
        or not selection.complete
        or request.get(BORROWED) is not None
        or request.path.startswith(_NOT_LENT)
    ):
        return ()
    links = request.app[LINKS].owned(lane.value, settings.cluster.node_id, config.id)
    if not links or _streams(selection.prefix):
        return ()
    return links


def _streams(body: bytes) -> bool:
    if b'"stream"' not in body:
        return False
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("stream") is True


def owner_busy(request: web.Request, config: ModelConfig) -> int:
    views = request.app[RUNTIMES].views()
    return sum(v.leases + v.queued for v in views if v.config.id == config.id)


async def lend(
    request: web.Request,
    selection: Selection,
    config: ModelConfig,
    links: tuple[Link, ...],
    result: ProxyResult,
) -> web.StreamResponse | None:
    """Hold the request while this node is busy with `config`; the helper's answer when one
    took it, None to run it here (not busy any more, returned, or held too long)."""
    settings = request.app[SETTINGS]
    depth = request.app[LENDING].values.scheduling_backend_depth
    end = time.monotonic() + settings.runtime.queue_timeout
    while True:
        busy = owner_busy(request, config)
        if busy < depth or time.monotonic() > end:
            return None  # no await between this check and the caller's lease
        helpers = await _helper_states(request, links)
        link = choose_helper(links, streaming=False, owner_busy=owner_busy(request, config),
                             depth=depth, helpers=helpers)  # fmt: skip
        if link is not None:
            return await _lend_once(request, selection, link, result)
        await asyncio.sleep(WAIT_STEP_S)


async def _helper_states(
    request: web.Request, links: tuple[Link, ...]
) -> dict[tuple[str, str], HelperState]:
    service = request.app[CLUSTER]
    table = request.app[LINKS]
    now = time.monotonic()
    stale = sorted(
        {link.helper_node_id for link in links}
        - {n for n, (at, _) in table.seen.items() if now - at < STATUS_TTL_S}
    )
    if stale:
        for node_id, status in (await service.runtime_statuses(stale)).items():
            table.seen[node_id] = (time.monotonic(), status)
    return {
        link.helper: _state(service, link, table.seen.get(link.helper_node_id)) for link in links
    }


def _state(
    service: ClusterService, link: Link, seen: tuple[float, RuntimeStatus | None] | None
) -> HelperState:
    status = seen[1] if seen else None
    entry = service.registry.node(link.helper_node_id)
    model = (
        next((m for m in entry.models if m.local_id == link.helper_model_id), None)
        if entry
        else None
    )
    available = entry is not None and entry.healthy and model is not None and model.available
    load = status.lanes.get(link.lane) if status else None
    own = max(0, load.active + load.queued - load.borrowed) if load else 0
    return HelperState(
        answered=status is not None,
        available=available,
        own_work=own,
        pending=service.pending.get(link.helper_node_id, 0),
        loaded=status is not None and link.helper_model_id in status.loaded_models,
    )


async def _lend_once(
    request: web.Request, selection: Selection, link: Link, result: ProxyResult
) -> web.StreamResponse | None:
    service = request.app[CLUSTER]
    entry = service.registry.node(link.helper_node_id)
    if entry is None:
        return None
    rewriter = ModelRewriter(selection.model or link.owner_model_id, link.helper_model_id)
    body = rewriter.request_body(selection.prefix) if selection.prefix else b""
    url = service.client.url(entry.node_url, node_path_qs(request, selection, link.helper_model_id))
    headers = node_headers(request, request.app[SETTINGS].cluster.token or "", selection,
                           link.helper_model_id)  # fmt: skip
    headers.popall("Accept-Encoding", None)  # the answer's model IDs are rewritten here
    # Named outright: the request may have had no selector (the lane's model was used here).
    headers[SELECTOR_HEADER] = link.helper_model_id
    headers[OFFLOAD_HEADER] = "1"
    headers[OFFLOAD_LOAD_HEADER] = "1" if link.load_if_unloaded else "0"
    headers["X-Tensors-Offload-Restore"] = "1" if link.restore_after_borrow else "0"
    idle = request.app[SETTINGS].runtime.stream_idle_timeout
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=idle)
    with service.reserved(link.helper_node_id):
        try:
            async with request.app[SESSION].request(
                request.method, url, data=body or None, headers=headers, timeout=timeout,
                allow_redirects=False,
            ) as upstream:  # fmt: skip
                raw = await upstream.read()
                status, content_type = upstream.status, upstream.headers.get("Content-Type")
        except aiohttp.ClientConnectionError as err:
            service.node_failed(entry.node_url, f"a lent request failed: {err}")
            return None
        except (aiohttp.ClientError, TimeoutError):
            return None
    if (status == 409 and _returned(raw)) or status >= 500:
        return None
    result.relayed, result.upstream_status, result.status = True, status, status
    result.bytes_in, result.bytes_out = len(body), len(raw)
    out = web.Response(status=status, body=rewriter.response_body(raw))
    if content_type:
        out.headers["Content-Type"] = content_type
    return out


def _returned(raw: bytes) -> bool:
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    error = doc.get("error") if isinstance(doc, dict) else None
    return isinstance(error, dict) and error.get("code") == OFFLOAD_RETURNED
