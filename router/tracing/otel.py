"""The OpenTelemetry tracer (the `otel` extra): the only module that imports opentelemetry.

Spans are made by hand where the router knows what happens (the pipeline, the runtime, the
proxy's callers), not by the aiohttp instrumentations, which would span every health check and
inject into every client call (docs/decisions.md, "Traces").
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, MutableMapping
from types import TracebackType

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode, format_trace_id

from router.tracing.api import CURRENT, Attribute, Attributes, Kind, Parent, Span

DEFAULT_SERVICE = "tensor-router"
_KINDS = {
    Kind.INTERNAL: trace.SpanKind.INTERNAL,
    Kind.SERVER: trace.SpanKind.SERVER,
    Kind.CLIENT: trace.SpanKind.CLIENT,
}
# The inbound trace headers are replaced by the router's own on every hop, never copied.
_HOP_HEADERS = ("traceparent", "tracestate")


class OtelSpan:
    __slots__ = ("_span", "failed")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self.failed = False

    @property
    def trace_id(self) -> str | None:
        return format_trace_id(self._span.get_span_context().trace_id)

    def set(self, key: str, value: Attribute | None) -> None:
        if value is not None:
            self._span.set_attribute(key, value)

    def update(self, attributes: Attributes) -> None:
        self._span.set_attributes(attributes)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self._span.add_event(name, attributes)

    def fail(self, error_type: str, message: str | None = None) -> None:
        self.failed = True
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, message))


class _Block:
    """A started span, ended when the `with` block leaves; an exception fails it unless its
    owner settles the status itself (a server span). A span that is `current` is this task's
    current span inside the block. A class rather than a generator: it is entered on every
    request while traces are on."""

    __slots__ = ("_current", "_raw", "_settled", "_span", "_token")

    def __init__(self, raw: trace.Span, *, settled: bool, current: bool) -> None:
        self._raw = raw
        self._span = OtelSpan(raw)
        self._settled = settled
        self._current = current
        self._token: object = None

    def __enter__(self) -> Span:
        if self._current:
            self._token = otel_context.attach(trace.set_span_in_context(self._raw))
        return self._span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None and not (self._span.failed or self._settled):
                self._span.fail(_error_type(exc), None)
        finally:
            if self._current:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            self._raw.end()


class OtelTracer:
    enabled = True

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("tensor-router")

    def span(
        self,
        name: str,
        *,
        kind: Kind = Kind.INTERNAL,
        attributes: Attributes | None = None,
        parent: Parent | None = CURRENT,
    ) -> contextlib.AbstractContextManager[Span]:
        if parent is CURRENT:
            context = None
        elif isinstance(parent, otel_context.Context):
            context = parent
        else:  # None: a trace of its own, whatever this task's current span is
            context = otel_context.Context()
        raw = self._tracer.start_span(
            name, context=context, kind=_KINDS[kind], attributes=attributes
        )
        return _Block(raw, settled=False, current=True)

    def server(
        self, name: str, carrier: Mapping[str, str], attributes: Attributes | None = None
    ) -> contextlib.AbstractContextManager[Span]:
        # A malformed traceparent extracts as nothing: a new trace (never a refusal).
        context = propagate.extract(carrier, context=otel_context.Context())
        raw = self._tracer.start_span(
            name, context=context, kind=trace.SpanKind.SERVER, attributes=attributes
        )
        # Its caller settles its status: a refusal (4xx) raised through it is no server error.
        return _Block(raw, settled=True, current=True)

    def client(
        self, name: str, carrier: MutableMapping[str, str], attributes: Attributes | None = None
    ) -> contextlib.AbstractContextManager[Span]:
        raw = self._tracer.start_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes)
        for header in _HOP_HEADERS:
            carrier.pop(header, None)
            carrier.pop(header.title(), None)
        # Injected from a context naming the span outright: it never becomes current.
        propagate.inject(carrier, context=trace.set_span_in_context(raw))
        return _Block(raw, settled=False, current=False)

    def capture(self) -> Parent | None:
        return otel_context.get_current()

    def close(self) -> None:
        self._provider.shutdown()


def _error_type(exc: BaseException) -> str:
    """A router error's code (`queue_full`, ...), else the exception's class name."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else type(exc).__qualname__


def resource() -> Resource:
    """OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES apply; the service is `tensor-router`
    when neither names one."""
    found = Resource.create()
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    return found


def tracer_for(processor: SpanProcessor) -> OtelTracer:
    """A tracer whose spans go to `processor` (tests: a simple processor around the SDK's
    in-memory exporter)."""
    provider = TracerProvider(resource=resource())
    provider.add_span_processor(processor)
    return OtelTracer(provider)


def from_environment() -> OtelTracer:
    """The exporting tracer: batches sent over OTLP/HTTP from the SDK's own thread, to the
    endpoint and with the settings the standard OTEL_* variables name."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return tracer_for(BatchSpanProcessor(OTLPSpanExporter()))
