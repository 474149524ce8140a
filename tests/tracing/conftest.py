"""Traces on, in this process: the SDK's in-memory exporter behind a processor that also wakes
the test when a span ends (spans end after the client has its answer: the recording and the
lease release run while it reads)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import format_span_id, format_trace_id

from router import tracing
from router.tracing import otel

Found = Sequence[ReadableSpan]


class Spans(SimpleSpanProcessor):
    """Finished spans in the SDK's in-memory exporter; `until` waits for the ones a test needs."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        super().__init__(self.exporter)
        self._ended = asyncio.Event()

    def on_end(self, span: ReadableSpan) -> None:
        super().on_end(span)
        self._ended.set()

    def finished(self) -> Found:
        return self.exporter.get_finished_spans()

    async def until(self, want: Callable[[Found], bool], deadline: float = 30.0) -> Found:
        """The finished spans once `want` holds for them (each ended span wakes this)."""
        async with asyncio.timeout(deadline):
            while not want(self.finished()):
                self._ended.clear()
                await self._ended.wait()
        return self.finished()

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name == name]


P = TypeVar("P", bound=SpanProcessor)


@contextlib.contextmanager
def installed(processor: P) -> Iterator[P]:
    """Traces on for the block, every span going to `processor`."""
    old = tracing.install(otel.tracer_for(processor))
    try:
        yield processor
    finally:
        tracing.install(old).close()


@pytest.fixture
def spans() -> Iterator[Spans]:
    with installed(Spans()) as processor:
        yield processor


def trace_of(span: ReadableSpan) -> str:
    return format_trace_id(span.context.trace_id)


def id_of(span: ReadableSpan) -> str:
    return format_span_id(span.context.span_id)


def parent_of(span: ReadableSpan, found: Found) -> ReadableSpan | None:
    """The finished span that is `span`'s parent, if any."""
    if span.parent is None:
        return None
    return next((s for s in found if s.context.span_id == span.parent.span_id), None)


def rooted(span: ReadableSpan, found: Found) -> bool:
    """Whether every span from `span` up to its trace's root has finished (is in `found`). A
    server span ends after its client has the answer, so a test that reads a whole chain waits
    for this, not only for the spans it names."""
    current = span
    while current.parent is not None:
        parent = parent_of(current, found)
        if parent is None:
            return False
        current = parent
    return True


def chain(span: ReadableSpan, found: Found) -> list[str]:
    """Names from `span` up to its root."""
    names: list[str] = []
    current: ReadableSpan | None = span
    while current is not None:
        names.append(current.name)
        current = parent_of(current, found)
    return names
