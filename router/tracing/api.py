"""The face of a tracer and the no-op one that stands in when tracing is off.

The no-op tracer hands out one shared, stateless context manager and one shared span whose
methods do nothing, so an instrumented line costs a call and no allocation; callers that would
compute an attribute only for the trace check `enabled` first.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol

Attribute = str | bool | int | float | Sequence[str]
Attributes = Mapping[str, Attribute]


class Kind(enum.Enum):
    INTERNAL = "internal"
    SERVER = "server"
    CLIENT = "client"


class _Current:
    """The parent of a span started without one named: the span current in this task."""


CURRENT: Final = _Current()
# A parent captured in one task for a span started in another (`Tracer.capture()`); None is
# no parent: the span starts a trace of its own.
Parent = object


class Span(Protocol):
    @property
    def trace_id(self) -> str | None:
        """32 lowercase hex digits, or None when nothing is traced."""

    def set(self, key: str, value: Attribute | None) -> None:
        """One attribute; None leaves it unset."""

    def update(self, attributes: Attributes) -> None:
        """Several attributes in one call (the SDK takes its lock once, not once each)."""

    def event(self, name: str, attributes: Attributes | None = None) -> None: ...

    def fail(self, error_type: str, message: str | None = None) -> None:
        """The work failed: `error.type` and an error status."""


class Tracer(Protocol):
    enabled: bool

    def span(
        self,
        name: str,
        *,
        kind: Kind = Kind.INTERNAL,
        attributes: Attributes | None = None,
        parent: Parent | None = CURRENT,
    ) -> AbstractContextManager[Span]:
        """A span current inside the block, ended when it leaves (failed if it raises)."""

    def server(
        self, name: str, carrier: Mapping[str, str], attributes: Attributes | None = None
    ) -> AbstractContextManager[Span]:
        """A SERVER span continuing the trace of the caller's `traceparent` (a malformed or
        missing one starts a new trace)."""

    def client(
        self, name: str, carrier: MutableMapping[str, str], attributes: Attributes | None = None
    ) -> AbstractContextManager[Span]:
        """A CLIENT span for a call to another process, child of the current span and injected
        into `carrier` (`traceparent`, `tracestate`, replacing the caller's) as the parent of
        what the callee does. Not made current: nothing in this task runs under it, so the
        context switch a current span costs is spared."""

    def capture(self) -> Parent | None:
        """The current span, as the parent of work another task does for it."""

    def close(self) -> None:
        """Export what is buffered (the router is stopping)."""


class _NoSpan:
    __slots__ = ()

    @property
    def trace_id(self) -> str | None:
        return None

    def set(self, key: str, value: Attribute | None) -> None:
        return None

    def update(self, attributes: Attributes) -> None:
        return None

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        return None

    def fail(self, error_type: str, message: str | None = None) -> None:
        return None


NO_SPAN: Final = _NoSpan()


class _NoBlock(AbstractContextManager[Span]):
    __slots__ = ()

    def __enter__(self) -> Span:
        return NO_SPAN

    def __exit__(self, *_: object) -> None:
        return None


_NO_BLOCK: Final = _NoBlock()


class NoTracer:
    """Tracing off: nothing is recorded, propagated or imported."""

    enabled = False

    def span(self, name: str, **_: Any) -> AbstractContextManager[Span]:
        return _NO_BLOCK

    def server(self, name: str, *_: Any) -> AbstractContextManager[Span]:
        return _NO_BLOCK

    def client(self, name: str, *_: Any) -> AbstractContextManager[Span]:
        return _NO_BLOCK

    def capture(self) -> Parent | None:
        return None

    def close(self) -> None:
        return None
