"""A hop's headers carry the router's own span, never the caller's: the lending hop (its wire
helper; the relay hop is covered end to end in test_relay.py) and the injection itself."""

from __future__ import annotations

from multidict import CIMultiDict
from opentelemetry.trace import SpanKind

from router import tracing
from router.lending.wire import lent_span
from tests.tracing.conftest import Spans, id_of, trace_of

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_lent_request_carries_the_lend_span_as_its_parent(spans: Spans) -> None:
    inbound = CIMultiDict({"traceparent": CALLER})
    with tracing.tracer().server("POST /v1/chat/completions", inbound):
        headers: CIMultiDict[str] = CIMultiDict({"Traceparent": CALLER, "Tracestate": "x=1"})
        with lent_span(headers, "s1", "fast") as span:
            span.set("tensor_router.returned", None)
    lend = spans.named("lend")[0]
    assert lend.kind is SpanKind.CLIENT
    assert lend.attributes is not None and lend.attributes["tensor_router.node"] == "s1"
    assert trace_of(lend) == "4bf92f3577b34da6a3ce929d0e0e4736"
    # One traceparent, the lend span's: the caller's own was replaced, not forwarded.
    assert headers.getall("traceparent") == [f"00-{trace_of(lend)}-{id_of(lend)}-01"]
    assert "tracestate" not in headers  # the caller's state went with its header


def test_with_traces_off_a_hop_adds_nothing() -> None:
    assert not tracing.tracer().enabled
    headers: CIMultiDict[str] = CIMultiDict({"traceparent": CALLER})
    with lent_span(headers, "s1", "fast") as span:
        assert span.trace_id is None
    assert headers.getall("traceparent") == [CALLER]


def test_a_hop_span_is_not_current_where_it_is_started(spans: Spans) -> None:
    """Nothing in this process runs under a hop (the callee does, in its own process): work
    started beside it stays a child of the server span, and no context switch is paid."""
    inbound = CIMultiDict({"traceparent": CALLER})
    with tracing.tracer().server("POST /v1/chat/completions", inbound):
        with lent_span(CIMultiDict(), "s1", "fast"):
            with tracing.tracer().span("beside"):
                pass
    server, lend, beside = (
        spans.named(n)[0] for n in ("POST /v1/chat/completions", "lend", "beside")
    )
    assert lend.parent is not None and lend.parent.span_id == server.context.span_id
    assert beside.parent is not None and beside.parent.span_id == server.context.span_id
