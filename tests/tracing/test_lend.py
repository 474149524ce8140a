"""A lent request is one trace across two router processes: the master's server span, its
`lend` hop (CLIENT) under it, the helper's server span continuing the lend span (its parent,
never the master's server span) and the helper's backend call under that. Both routers export
over OTLP/HTTP to a receiver this test runs; a graceful stop flushes what they hold."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.lending.test_helper import linked, nodes
from tests.support.harness import RouterHarness, chat
from tests.support.router_process import RouterProcess
from tests.tracing.test_otlp_export import receiving

CHAT = "/v1/chat/completions"
N = 8  # concurrent requests for the master's model: more than it runs at once


async def _stopped(*routers: RouterProcess) -> None:
    """SIGTERM and a clean exit: the stop exports the last batch."""
    for router in routers:
        assert router.proc is not None
        router.proc.send_signal(signal.SIGTERM)
    for router in routers:
        assert await router.wait_exit(60) == 0


async def test_the_helpers_server_span_is_the_child_of_the_masters_lend_span(
    tmp_harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with receiving(monkeypatch) as receiver:
        # The master lends two at once to a helper that takes 1.6 s a job (test_helper.py).
        master, slave = nodes(tmp_harness, master_rate=20, fast_rate=5, lent_at_once=2)
        await master.start()
        await slave.start()
        async with (
            httpx.AsyncClient(base_url=master.base, timeout=120) as client,
            httpx.AsyncClient(base_url=slave.base, timeout=60) as node,
        ):
            warm = await client.post(CHAT, json=chat("slow", max_tokens=2))
            assert warm.status_code == 200, warm.text
            assert (await node.post(CHAT, json=chat("fast", max_tokens=2))).status_code == 200
            await linked(client, restore=False)
            replies = await asyncio.gather(
                *(client.post(CHAT, json=chat("slow", max_tokens=8)) for _ in range(N))
            )
            assert [r.status_code for r in replies] == [200] * N
        await _stopped(master, slave)
    spans = [s for _, s in receiver.spans()]
    by_id = {s.span_id: s for s in spans}
    lends = [s for s in spans if s.name == "lend"]
    assert lends, "the master lent nothing: no lend span"
    for lend in lends:  # each under the master's server span of the request it lent
        owner = by_id[lend.parent_span_id]
        assert lend.kind == Span.SPAN_KIND_CLIENT
        assert owner.kind == Span.SPAN_KIND_SERVER and owner.trace_id == lend.trace_id
    lend_ids = {lend.span_id for lend in lends}
    helpers = [s for s in spans if s.kind == Span.SPAN_KIND_SERVER and s.parent_span_id in lend_ids]
    assert helpers, "no helper server span continues a lend span"
    assert all(h.trace_id == by_id[h.parent_span_id].trace_id for h in helpers)
    # The helper's backend call hangs off its server span, in the master's trace.
    helper_ids = {h.span_id: h.trace_id for h in helpers}
    lent_calls = [s for s in spans if s.name == "chat fast" and s.parent_span_id in helper_ids]
    assert lent_calls and all(c.trace_id == helper_ids[c.parent_span_id] for c in lent_calls)
