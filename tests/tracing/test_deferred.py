"""The server and CLIENT spans are deferred (docs/decisions.md, "Deferred spans"): their ids
are chosen when they start and the SDK's spans are made when they end. What a backend and an
exporter see must be what the SDK itself would have made: the same `traceparent`, the same
parsing of the caller's, the same sampling, the start time of the work."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from multidict import CIMultiDict
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from router import tracing
from router.tracing import w3c
from tests.tracing.conftest import Spans, id_of, installed, trace_of

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"
ROUTE = "POST /v1/chat/completions"


class Started(Spans):
    """Also counts the spans the SDK has made (started) so far."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0

    def on_start(self, span: SdkSpan, parent_context: otel_context.Context | None = None) -> None:
        self.started += 1


@pytest.fixture
def started() -> Iterator[Started]:
    with installed(Started()) as processor:
        yield processor


def test_no_sdk_span_is_made_in_front_of_the_backend_call(started: Started) -> None:
    """The SDK's span creation (sampler, attribute checks, processors) runs after the answer,
    with the start time the work had."""
    before = time.time_ns()
    with tracing.tracer().server(ROUTE, CIMultiDict({"traceparent": CALLER})):
        headers: CIMultiDict[str] = CIMultiDict()
        with tracing.tracer().client("chat fast", headers) as call:
            inside = time.time_ns()
            assert started.started == 0  # the backend call would leave here
            call.update({"http.response.status_code": 200})
    after = time.time_ns()
    server, backend = started.named(ROUTE)[0], started.named("chat fast")[0]
    assert started.started == 2
    for span in (server, backend):
        assert span.start_time is not None and span.end_time is not None
        assert before <= span.start_time <= inside <= span.end_time <= after
    assert backend.attributes is not None
    assert backend.attributes["http.response.status_code"] == 200
    assert backend.parent is not None and backend.parent.span_id == server.context.span_id
    assert server.parent is not None and server.parent.is_remote
    assert headers["traceparent"] == f"00-{CALLER_TRACE}-{id_of(backend)}-01"


def test_a_span_made_after_a_deferred_one_draws_ids_of_its_own(spans: Spans) -> None:
    """The ids a deferred span chose are the SDK's for that span only (a child takes no trace
    id from the generator, so an unused chosen one must not pass to the next root)."""
    with tracing.tracer().server(ROUTE, {"traceparent": CALLER}):
        pass
    with tracing.tracer().span("model load", parent=None):
        pass
    server, load = spans.named(ROUTE)[0], spans.named("model load")[0]
    assert trace_of(server) == CALLER_TRACE
    assert trace_of(load) != CALLER_TRACE
    assert load.context.span_id != server.context.span_id


def _sdk_traceparent(span: trace.Span) -> dict[str, str]:
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(span))
    return carrier


@pytest.mark.parametrize(
    "inbound",
    [
        {},  # a new trace: the SDK flags its random trace id (03)
        {"traceparent": CALLER},
        {"traceparent": CALLER, "tracestate": "vendor=a,other=b"},
        {"traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-03"},
    ],
)
def test_the_injected_headers_are_the_ones_the_sdk_writes_for_the_span(
    spans: Spans, inbound: dict[str, str]
) -> None:
    headers: CIMultiDict[str] = CIMultiDict()
    with tracing.tracer().server(ROUTE, inbound):
        with tracing.tracer().client("chat fast", headers):
            pass
    backend = spans.named("chat fast")[0]
    assert dict(headers) == _sdk_traceparent(trace.NonRecordingSpan(backend.context))
    if inbound:
        assert trace_of(backend) == CALLER_TRACE


@pytest.mark.parametrize(
    "carrier",
    [
        {},
        {"traceparent": CALLER},
        {"traceparent": "  " + CALLER},
        {"traceparent": CALLER + "-more"},  # version 00 has four fields
        {"traceparent": f"01-{CALLER_TRACE}-00f067aa0ba902b7-01-more"},  # a later one may
        {"traceparent": f"ff-{CALLER_TRACE}-00f067aa0ba902b7-01"},
        {"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"},
        {"traceparent": f"00-{CALLER_TRACE}-{'0' * 16}-01"},
        {"traceparent": CALLER.upper()},
        {"traceparent": CALLER + " " * 600},
        {"traceparent": "garbage"},
        {"traceparent": CALLER, "tracestate": "vendor=a"},
        {"traceparent": CALLER, "tracestate": "x" * 600},
    ],
)
def test_the_callers_headers_read_as_the_sdk_reads_them(carrier: dict[str, str]) -> None:
    extracted = TraceContextTextMapPropagator().extract(carrier)
    expected = trace.get_current_span(extracted).get_span_context()
    found = w3c.read(carrier)
    if not expected.is_valid:
        assert found is None
        return
    assert found is not None
    assert (found.trace_id, found.span_id, found.flags) == (
        expected.trace_id,
        expected.span_id,
        expected.trace_flags,
    )
    assert (found.state or "") == expected.trace_state.to_header()


def test_an_unsampled_caller_gets_no_spans_but_its_trace_goes_on(spans: Spans) -> None:
    headers: CIMultiDict[str] = CIMultiDict()
    caller = f"00-{CALLER_TRACE}-00f067aa0ba902b7-00"
    with tracing.tracer().server(ROUTE, {"traceparent": caller}) as server:
        with tracing.tracer().client("chat fast", headers):
            pass
    assert server.trace_id == CALLER_TRACE  # the answer's X-Trace-Id and the analytics row
    assert headers["traceparent"].startswith(f"00-{CALLER_TRACE}-")
    assert headers["traceparent"].endswith("-00")
    assert spans.finished() == ()


def test_a_configured_sampler_decides_the_injected_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another sampler than the default is asked up front, as the SDK would ask it."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    headers: CIMultiDict[str] = CIMultiDict()
    with installed(Spans()) as processor:
        with tracing.tracer().server(ROUTE, {"traceparent": CALLER}):
            with tracing.tracer().client("chat fast", headers):
                pass
    assert headers["traceparent"].endswith("-00")  # the caller sampled it; this sampler not
    assert processor.finished() == ()


def test_other_propagators_are_asked_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    """`OTEL_PROPAGATORS=none`: no header is read or written, as the propagator API does."""
    monkeypatch.setattr(propagate, "get_global_textmap", lambda: CompositePropagator([]))
    headers: CIMultiDict[str] = CIMultiDict()
    with installed(Spans()) as processor:
        with tracing.tracer().server(ROUTE, {"traceparent": CALLER}) as server:
            with tracing.tracer().client("chat fast", headers):
                pass
    assert server.trace_id != CALLER_TRACE  # the caller's header was not read
    assert "traceparent" not in headers
    assert [s.name for s in processor.finished()] == ["chat fast", ROUTE]
