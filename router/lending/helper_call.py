"""The owner's call to a helper (router/lending/owner.py lends, this sends): one lent request
sent to the helper's node (or by one loopback hop to the master's own), its answer read whole,
or the reason it goes back to its owner (a 409 `offload_returned`, a 5xx, a helper found down,
no answer head within the priced cut).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import dataclass

from multidict import CIMultiDict

from router.cluster import Asked, NodeEntry, PeerUnreachable, node_headers, node_path_qs
from router.errors import BadGateway, GatewayTimeout
from router.forwarding import ModelRewriter, ProxyResult, Selection
from router.forwarding.selector import SELECTOR_HEADER
from router.lending.leases import Lease
from router.lending.links import Link
from router.lending.planner import Planner
from router.lending.planning import cut_after
from router.lending.state import LendingState
from router.lending.wire import OFFLOAD_RETURNED, lent_headers, lent_span, returned_message


@dataclass(frozen=True)
class Answer:
    """A helper's whole answer to a lent request: the caller renders it to its client."""

    status: int
    content_type: str | None
    body: bytes


class HelperCall:
    """Sends the owner's lent requests to their helpers (one per `Owner`)."""

    def __init__(self, lending: LendingState, planner: Planner) -> None:
        self.lending = lending
        self.planner = planner

    async def send(
        self,
        asked: Asked,
        selection: Selection,
        link: Link,
        lease: Lease,
        result: ProxyResult,
    ) -> tuple[Answer | None, str]:
        """The helper's answer, or None and why the request goes back to its owner."""
        service = self.lending.cluster
        itself = link.helper_node_id == self.lending.node_id
        entry = None if itself else service.registry.node(link.helper_node_id)
        if entry is None and not itself:
            return None, "helper_not_registered"
        rewriter = ModelRewriter(selection.model or link.owner_model_id, link.helper_model_id)
        body = rewriter.request_body(selection.prefix) if selection.prefix else b""
        target = (self._helper_base(entry), node_path_qs(asked, selection, link.helper_model_id))
        headers = self._lent_headers(asked, selection, link, lease)
        owner_fit, helper_fit = self.planner.fits_of(lease)
        cut = cut_after(lease.load_helper_model, helper_fit, owner_fit)
        # The master's own node is no relay target: nothing to reserve there.
        with (
            contextlib.nullcontext() if itself else service.reserved(link.helper_node_id),
            lent_span(headers, link.helper_node_id, link.helper_model_id) as span,
        ):
            exchange = self._exchange(asked.method, target, body, headers, cut)
            answer, why = await self._sent(exchange, cut, entry)
            span.set("tensor_router.returned", why or None)
        if answer is None:
            return None, why
        status, raw = answer.status, answer.body
        returned = returned_message(raw) if status == 409 else None
        if returned is not None or status >= 500:
            return (
                None,
                f"{OFFLOAD_RETURNED}: {returned}" if returned is not None else f"status {status}",
            )
        result.relayed, result.upstream_status, result.status = True, status, status
        result.bytes_in, result.bytes_out = len(body), len(raw)
        return Answer(status, answer.content_type, rewriter.response_body(raw)), ""

    def _lent_headers(
        self, asked: Asked, selection: Selection, link: Link, lease: Lease
    ) -> CIMultiDict[str]:
        """The node headers of a lent request: the helper's model named, the lending marks."""
        token = self.lending.settings.cluster.token or ""
        headers = node_headers(asked, token, selection, link.helper_model_id)
        headers.popall("Accept-Encoding", None)  # the answer's model IDs are rewritten here
        # Named outright: the request may have had no selector (the lane's model was used here).
        headers[SELECTOR_HEADER] = link.helper_model_id
        headers.update(
            lent_headers(
                link.owner, allow_load=link.load_if_unloaded, restore=lease.restore_helper_model
            )
        )
        return headers

    async def _sent(
        self, exchange: Awaitable[Answer], cut: float | None, entry: NodeEntry | None
    ) -> tuple[Answer | None, str]:
        """The `exchange`'s answer, or None and why the helper gave none (a helper found down
        is marked failed: `entry` None is the master's own node)."""
        try:
            return await exchange, ""
        except _NotStarted:
            return None, f"helper_not_started within {cut or 0:g}s"
        except (PeerUnreachable, GatewayTimeout) as err:
            # A connection refused or lost, or silent past the connect or idle deadline
            # (aiohttp's socket timeouts are connection errors): the helper is down.
            if entry is not None:
                self.lending.cluster.node_failed(entry.node_url, f"a lent request failed: {err}")
            return None, "helper_unreachable"
        except (BadGateway, TimeoutError):
            return None, "forward_failed"  # a malformed or cut-short answer

    def _helper_base(self, entry: NodeEntry | None) -> str:
        """The helper node's base URL; `entry` None: the master's own model is the helper,
        reached by one loopback hop to its own node inference route (the node client allows
        its own listener), so the lent request takes the helper's path (mark, gate, hand
        back, records) as on any slave."""
        return self.lending.loopback_url() if entry is None else entry.node_url

    async def _exchange(
        self,
        method: str,
        target: tuple[str, str],
        body: bytes,
        headers: CIMultiDict[str],
        cut: float | None,
    ) -> Answer:
        """Send a lent request through the node client's streamed mode and read the answer
        whole; its status, content type and body. The answer's head must come within `cut`
        seconds (when priced); the connection within 5 s; then the body under the idle
        timeout."""
        client, (base, path_qs) = self.lending.cluster.client, target
        idle = self.lending.settings.runtime.stream_idle_timeout
        deadline = asyncio.timeout(cut)
        try:
            async with deadline:
                upstream = await client.stream(
                    method, base, path_qs, data=body or None, headers=headers, connect=5, idle=idle
                )
        except TimeoutError:
            # Only `cut` ends here: the client's own deadlines (connect, idle) are GatewayTimeout.
            if deadline.expired():
                raise _NotStarted from None
            raise
        async with upstream:
            raw = b"".join([chunk async for chunk in upstream.chunks()])
            return Answer(upstream.status, upstream.headers.get("Content-Type"), raw)


class _NotStarted(Exception):
    """The helper did not start answering in time: the owner takes the request back."""
