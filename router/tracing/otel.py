"""The OpenTelemetry tracer (the `otel` extra): the only module that imports opentelemetry.

Spans are made by hand where the router knows what happens (the pipeline, the runtime, the
proxy's callers), not by the aiohttp instrumentations, which would span every health check and
inject into every client call (docs/decisions.md, "Traces").

The server span of a request and the CLIENT spans of its calls are deferred: their ids and
start time are chosen when they start (the `X-Trace-Id` header and the injected `traceparent`
need them), and the SDK's span is made when they end, with those ids and times, after the
answer has been passed on (docs/decisions.md, "Deferred spans").
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Mapping, MutableMapping
from types import TracebackType
from typing import Protocol

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import (
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    format_trace_id,
)

from router.tracing import w3c
from router.tracing.api import CURRENT, Attribute, Attributes, Kind, Parent, Span

DEFAULT_SERVICE = "tensor-router"
_KINDS = {
    Kind.INTERNAL: trace.SpanKind.INTERNAL,
    Kind.SERVER: trace.SpanKind.SERVER,
    Kind.CLIENT: trace.SpanKind.CLIENT,
}
# The inbound trace headers are replaced by the router's own on every hop, never copied.
_HOP_HEADERS = ("traceparent", "tracestate")
# The propagators whose headers the router reads and writes itself: W3C trace context, with
# or without baggage (the default; a deferred span carries no baggage, so only trace context
# is written). Others (`OTEL_PROPAGATORS`, `none` too) go through the propagator API.
_W3C_FIELDS = frozenset(("traceparent", "tracestate", "baggage"))
_SAMPLED = TraceFlags.SAMPLED
# The W3C level 2 flag the SDK sets on a trace id it drew at random (older APIs lack it).
_RANDOM = int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0))


class _Ending(Span, Protocol):
    failed: bool

    def end(self) -> None: ...


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

    def end(self) -> None:
        self._span.end()


class _ChosenIds(IdGenerator):
    """Random ids, except the ones a deferred span chose when it started: the SDK asks for a
    span's ids when the span is made, which for a deferred span is when it ends. Only the event
    loop's thread makes spans, and a chosen id is taken by the very next call."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_trace_id(self) -> int:
        chosen, self.trace_id = self.trace_id, 0
        return chosen or _random_id(128)

    def generate_span_id(self) -> int:
        chosen, self.span_id = self.span_id, 0
        return chosen or _random_id(64)

    def is_trace_id_random(self) -> bool:
        return True


def _random_id(bits: int) -> int:
    """What the SDK's RandomIdGenerator draws: random bits, never all zero (invalid)."""
    found = random.getrandbits(bits)
    while not found:
        found = random.getrandbits(bits)
    return found


class _Deferred:
    """A span known by its ids and start time; the SDK's span is made when it ends, with the
    attributes, events and status gathered meanwhile (a plain dict: no lock, no checks)."""

    __slots__ = (
        "_attributes",
        "_events",
        "_kind",
        "_name",
        "_owner",
        "_parent",
        "_start",
        "_status",
        "context",
        "failed",
    )

    def __init__(
        self,
        owner: OtelTracer,
        name: str,
        kind: trace.SpanKind,
        parent: SpanContext | None,
        context: SpanContext,
        attributes: Attributes | None,
    ) -> None:
        self._owner, self._name, self._kind = owner, name, kind
        self._parent, self.context = parent, context
        self._attributes: dict[str, Attribute] = dict(attributes) if attributes else {}
        self._events: list[tuple[str, Attributes | None, int]] = []
        self._status: Status | None = None
        self.failed = False
        self._start = time.time_ns()

    @property
    def trace_id(self) -> str | None:
        return f"{self.context.trace_id:032x}"

    def set(self, key: str, value: Attribute | None) -> None:
        if value is not None:
            self._attributes[key] = value

    def update(self, attributes: Attributes) -> None:
        self._attributes.update(attributes)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self._events.append((name, attributes, time.time_ns()))

    def fail(self, error_type: str, message: str | None = None) -> None:
        self.failed = True
        self._attributes["error.type"] = error_type
        self._status = Status(StatusCode.ERROR, message)

    def end(self) -> None:
        ended = time.time_ns()
        if not self.context.trace_flags.sampled:
            return  # the SDK would make a non-recording span: nothing to record or export
        raw = self._owner.made(
            self._name, self._kind, self._parent, self.context, self._attributes, self._start
        )
        for name, attributes, at in self._events:
            raw.add_event(name, attributes, at)
        if self._status is not None:
            raw.set_status(self._status)
        raw.end(end_time=ended)


class _Block:
    """A started span, ended when the `with` block leaves; an exception fails it unless its
    owner settles the status itself (a server span). A block with a `current` span makes it
    this task's current span inside the block. A class rather than a generator: it is entered
    on every request while traces are on."""

    __slots__ = ("_current", "_settled", "_span", "_token")

    def __init__(self, span: _Ending, *, settled: bool, current: trace.Span | None) -> None:
        self._span = span
        self._settled = settled
        self._current = current
        self._token: object = None

    def __enter__(self) -> Span:
        if self._current is not None:
            self._token = otel_context.attach(trace.set_span_in_context(self._current))
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
            if self._current is not None:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            self._span.end()


class OtelTracer:
    enabled = True

    def __init__(self, provider: TracerProvider, ids: _ChosenIds) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("tensor-router")
        self._ids = ids
        # The default sampler follows the parent and samples a root: decided without a call.
        self._sampler = None if provider.sampler is sampling.DEFAULT_ON else provider.sampler
        fields = propagate.get_global_textmap().fields
        self._w3c = "traceparent" in fields and fields <= _W3C_FIELDS

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
        return _Block(OtelSpan(raw), settled=False, current=raw)

    def server(
        self, name: str, carrier: Mapping[str, str], attributes: Attributes | None = None
    ) -> contextlib.AbstractContextManager[Span]:
        # A malformed traceparent extracts as nothing: a new trace (never a refusal).
        parent = _traceparent(carrier) if self._w3c else _extracted(carrier)
        span = self._deferred(name, trace.SpanKind.SERVER, parent, attributes)
        # Its caller settles its status: a refusal (4xx) raised through it is no server error.
        return _Block(span, settled=True, current=trace.NonRecordingSpan(span.context))

    def client(
        self, name: str, carrier: MutableMapping[str, str], attributes: Attributes | None = None
    ) -> contextlib.AbstractContextManager[Span]:
        parent = trace.get_current_span().get_span_context()
        kind = trace.SpanKind.CLIENT
        span = self._deferred(name, kind, parent if parent.is_valid else None, attributes)
        for header in _HOP_HEADERS:
            carrier.pop(header, None)
            carrier.pop(header.title(), None)
        self._inject(carrier, span.context)
        # Never current: nothing in this task runs under it.
        return _Block(span, settled=False, current=None)

    def _deferred(
        self,
        name: str,
        kind: trace.SpanKind,
        parent: SpanContext | None,
        attributes: Attributes | None,
    ) -> _Deferred:
        """The span's ids and flags, chosen as the SDK's `start_span` would choose them."""
        trace_id = parent.trace_id if parent is not None else _random_id(128)
        random_bit = _RANDOM if parent is None else parent.trace_flags & _RANDOM
        if self._sampler is None:
            sampled = parent is None or parent.trace_flags.sampled
            state = parent.trace_state if parent is not None else None
        else:
            decided = self._sampler.should_sample(
                _context_of(parent), trace_id, name, kind, attributes
            )
            sampled = decided.decision is sampling.Decision.RECORD_AND_SAMPLE
            state = decided.trace_state
        flags = TraceFlags((_SAMPLED if sampled else 0) | random_bit)
        context = SpanContext(trace_id, _random_id(64), False, flags, state)
        return _Deferred(self, name, kind, parent, context, attributes)

    def made(
        self,
        name: str,
        kind: trace.SpanKind,
        parent: SpanContext | None,
        context: SpanContext,
        attributes: Attributes,
        start: int,
    ) -> trace.Span:
        """The SDK's span of a deferred one: its chosen ids, its parent, its start time."""
        self._ids.trace_id, self._ids.span_id = context.trace_id, context.span_id
        try:
            return self._tracer.start_span(
                name,
                context=_context_of(parent),
                kind=kind,
                attributes=attributes,
                start_time=start,
            )
        finally:  # a child takes its parent's trace id: the chosen one must not outlive this
            self._ids.trace_id = self._ids.span_id = 0

    def _inject(self, carrier: MutableMapping[str, str], context: SpanContext) -> None:
        """`traceparent` (and a non-empty `tracestate`) as the W3C propagator writes them, or
        through the configured propagators when they are others."""
        if not self._w3c:
            propagate.inject(
                carrier, context=trace.set_span_in_context(trace.NonRecordingSpan(context))
            )
            return
        carrier["traceparent"] = w3c.traceparent(
            context.trace_id, context.span_id, context.trace_flags
        )
        if context.trace_state:
            carrier["tracestate"] = context.trace_state.to_header()

    def capture(self) -> Parent | None:
        return otel_context.get_current()

    def close(self) -> None:
        self._provider.shutdown()


def _context_of(parent: SpanContext | None) -> otel_context.Context:
    """A context whose span is `parent` (an empty one for a root), as the SDK takes a parent."""
    if parent is None:
        return otel_context.Context()
    return trace.set_span_in_context(trace.NonRecordingSpan(parent), otel_context.Context())


def _extracted(carrier: Mapping[str, str]) -> SpanContext | None:
    """The caller's span as the configured (not W3C) propagators read it."""
    extracted = propagate.extract(carrier, context=otel_context.Context())
    found = trace.get_current_span(extracted).get_span_context()
    return found if found.is_valid else None


def _traceparent(carrier: Mapping[str, str]) -> SpanContext | None:
    """The caller's span from its W3C headers (router/tracing/w3c.py)."""
    caller = w3c.read(carrier)
    if caller is None:
        return None
    state = TraceState.from_header([caller.state]) if caller.state else None
    return SpanContext(caller.trace_id, caller.span_id, True, TraceFlags(caller.flags), state)


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
    return _HashedOnce(found)


class _HashedOnce(Resource):
    """A resource whose hash is computed once. The OTLP encoder groups the spans of a batch by
    resource, hashing it for every span, and the SDK's hash is a JSON dump of the attributes
    (about 10 us, an eighth of a span's encoding, on the export thread that holds the GIL).
    A resource never changes, so neither does its hash."""

    def __init__(self, found: Resource) -> None:
        super().__init__(found.attributes, found.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


def tracer_for(processor: SpanProcessor) -> OtelTracer:
    """A tracer whose spans go to `processor` (tests: a simple processor around the SDK's
    in-memory exporter)."""
    ids = _ChosenIds()
    provider = TracerProvider(resource=resource(), id_generator=ids)
    provider.add_span_processor(processor)
    return OtelTracer(provider, ids)


def from_environment() -> OtelTracer:
    """The exporting tracer: batches sent over OTLP/HTTP from the SDK's own thread, to the
    endpoint and with the settings the standard OTEL_* variables name."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return tracer_for(BatchSpanProcessor(OTLPSpanExporter()))
