"""Load captures: what one load attempt did, fed from the runtime into the store.

Opt-in per node (`analytics.load_capture_enabled`): the sanitized .kcpps snapshot, asset hashes,
argv without secrets, the backend's stdout/stderr as ordered chunks (the store caps them), and
what the read-ahead of its files had done when it began (`readahead`, docs/swaps.md), and for
a model spread over lending nodes the bytes its load sent to each (`pooled`, docs/cluster.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from router.runtime.state import Runtime
from router.store import Store

ReadAheadFigures = Callable[[str], dict[str, Any] | None]
# Borrower.sent: bytes per lending node, read off the event loop (`ss`, bounded)
PooledFigures = Callable[[str], Awaitable[dict[str, Any] | None]]


@dataclass(eq=False)
class CaptureObserver:
    """One load of `runtime`, captured into the store's load attempts (`kind`: load or
    restart); `readahead` names what the read-ahead did for it, when it ran."""

    store: Store
    runtime: Runtime
    kind: str = "load"
    readahead: ReadAheadFigures | None = None
    pooled: PooledFigures | None = None
    attempt_id: str | None = field(default=None, init=False)
    trace_id: str | None = field(default=None, init=False)  # set before it launches
    _sent: dict[str, Any] | None = field(default=None, init=False)

    def launched(self, argv: list[str]) -> None:
        config = self.runtime.config
        self.attempt_id = self.store.load_attempts.start(
            model=config.id,
            backend=self.runtime.spec.family.value,
            kind=self.kind,
            lane=self.runtime.spec.lane.value,
            kcpps=dict(config.raw),
            asset_hashes=dict(config.asset_sha256),
            argv=argv,
            home_dirs=(str(Path.home()),),
            # Called just before the spawn: the loader has frozen the figures at this load's start.
            readahead=self.readahead(self.runtime.key) if self.readahead else None,
            trace_id=self.trace_id,
        )

    def output(self, stream: str, line: bytes) -> None:
        if self.attempt_id is not None:
            self.store.load_attempts.output(self.attempt_id, stream, line + b"\n")

    async def ready(self) -> None:
        """The backend answered ready, just before `finished("ok")`: llama-server has sent
        every weight it sends at load, so what it sent to its lending nodes is read now."""
        if self.attempt_id is not None and self.pooled is not None:
            self._sent = await self.pooled(self.runtime.key)

    def finished(self, status: str, exit_code: int | None, error: str | None) -> None:
        if self.attempt_id is None:
            return
        pooled = self._sent if status == "ok" else None
        self.store.load_attempts.finish(self.attempt_id, status, exit_code, error, pooled=pooled)


def observer_factory(
    store: Store,
    readahead: ReadAheadFigures | None = None,
    pooled: PooledFigures | None = None,
) -> Callable[[Runtime], CaptureObserver | None]:
    """The runtime's observer factory: a capture per load when the node has captures on;
    `readahead(key)`: what the read-ahead had done when that load began (ReadAhead.at_load);
    `pooled(key)`: the bytes that load sent to each lending node (Borrower.sent)."""

    def make(runtime: Runtime) -> CaptureObserver | None:
        if not store.load_attempts.enabled:
            return None
        return CaptureObserver(store, runtime, readahead=readahead, pooled=pooled)

    return make
