"""A relayed chat is one trace across master, slave and backend: the master's server span, its
relay hop (CLIENT), the slave's server span continuing it, and the slave's backend call under
that, never siblings. Both routers run in this process so one in-memory exporter sees both."""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from tests.support.cluster import master_here, slave_here
from tests.support.harness import RouterHarness, chat, free_port, until
from tests.tracing.conftest import Found, Spans, chain, rooted, trace_of

CHAT = "/v1/chat/completions"


async def test_master_relay_slave_and_backend_form_one_tree(
    harness: RouterHarness, spans: Spans
) -> None:
    master_port, slave_port = free_port(), free_port()
    async with (
        slave_here(harness, slave_port, master_port) as slave_url,
        master_here(harness, master_port, slave_url) as client,
    ):

        async def listed() -> bool:
            models = (await client.get("/v1/models")).json().get("data", [])
            return any(m["id"] == "b" for m in models)

        assert await until(listed, True)
        answer = await client.post(CHAT, json=chat("b", max_tokens=2))
        assert answer.status_code == 200, answer.text
        trace_id = answer.headers["X-Trace-Id"]

        def complete(found: Found) -> bool:
            # The chains read below, each up to the master's server span, all finished.
            backend, load = spans.named("chat b"), spans.named("model load")
            return (
                len(backend) == 1
                and len(spans.named("relay")) == 1
                and all(rooted(s, found) for s in (*backend, *load))
            )

        found = [s for s in await spans.until(complete) if trace_of(s) == trace_id]
    backend = spans.named("chat b")[0]
    assert backend.kind is SpanKind.CLIENT and trace_of(backend) == trace_id
    names = chain(backend, found)
    assert names[0] == "chat b" and names[-2:] == ["relay", f"POST {CHAT}"], names
    slave_server = next(s for s in found if s.name == names[1])
    assert slave_server.kind is SpanKind.SERVER
    relay = spans.named("relay")[0]
    assert relay.kind is SpanKind.CLIENT
    assert relay.attributes is not None and relay.attributes["tensor_router.node"] == "s1"
    # The slave's load hangs off its own queue wait, inside the same trace.
    load = spans.named("model load")[0]
    assert trace_of(load) == trace_id and chain(load, found)[1:3] == ["queue wait", names[1]]
