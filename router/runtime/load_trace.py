"""The runtime's spans (docs/observability.md, "Traces"): a request's queue wait and the
model load it starts.

A load runs in its own task, started by whichever call ran the pump, so its parent is named
explicitly: the trace context of the first request waiting for it (its queue wait span), or
none (a trace of its own) for a load nobody waits for. The backend's load progress, throttled
as its `load_progress` events are (progress.py), becomes the span's events: the load's stages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from router.runtime.progress import Publish
from router.runtime.queues import Waiter
from router.runtime.state import Runtime, RuntimeSpec, RuntimeState
from router.tracing import Parent, Span, tracer

OWN = "tensor_router."


def queue_span(spec: RuntimeSpec) -> contextlib.AbstractContextManager[Span]:
    """A request's wait for a lease (admission and queue); a load it starts is its child."""
    attributes = {OWN + "model": spec.config.id, OWN + "lane": spec.lane.value}
    return tracer().span("queue wait", attributes=attributes)


def parent_of(waiters: list[Waiter], key: str) -> Parent | None:
    """The trace context of the first request waiting for runtime `key`, if any."""
    return next((w.trace for w in waiters if w.spec.key == key and not w.gone), None)


@contextlib.contextmanager
def load_span(runtime: Runtime, parent: Parent | None) -> Iterator[Span]:
    attributes = {
        OWN + "model": runtime.config.id,
        OWN + "lane": runtime.spec.lane.value,
        OWN + "backend": runtime.spec.family.value,
    }
    with tracer().span("model load", attributes=attributes, parent=parent) as span:
        yield span
        if runtime.state is RuntimeState.FAILED:
            span.fail("load_failed", runtime.error)


def staged(publish: Publish, span: Span) -> Publish:
    """`publish`, with every `load_progress` event also an event of the load's span."""
    if not tracer().enabled:
        return publish

    def both(event: str, **fields: Any) -> Any:
        if event == "load_progress":
            stage = {"phase": str(fields.get("phase", ""))}
            for key in ("percent", "elapsed_seconds"):
                if fields.get(key) is not None:
                    stage[key] = fields[key]
            span.event("load stage", stage)
        return publish(event, **fields)

    return both
