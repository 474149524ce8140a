"""Load captures: what one load attempt did, fed from the runtime into the store.

Opt-in per node (`analytics.load_capture_enabled`): the sanitized .kcpps snapshot, asset hashes,
argv without secrets, the backend's stdout/stderr as ordered chunks (the store caps them), and
what the read-ahead of its files had done when it began (`readahead`, docs/swaps.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from router.runtime.state import Runtime
from router.store import Store

ReadAheadFigures = Callable[[str], dict[str, Any] | None]


@dataclass(eq=False)
class CaptureObserver:
    """One load of `runtime`, captured into the store's load attempts (`kind`: load or
    restart); `readahead` names what the read-ahead did for it, when it ran."""

    store: Store
    runtime: Runtime
    kind: str = "load"
    readahead: ReadAheadFigures | None = None
    attempt_id: str | None = field(default=None, init=False)

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
        )

    def output(self, stream: str, line: bytes) -> None:
        if self.attempt_id is not None:
            self.store.load_attempts.output(self.attempt_id, stream, line + b"\n")

    def finished(self, status: str, exit_code: int | None, error: str | None) -> None:
        if self.attempt_id is not None:
            self.store.load_attempts.finish(self.attempt_id, status, exit_code, error)


def observer_factory(
    store: Store, readahead: ReadAheadFigures | None = None
) -> Callable[[Runtime], CaptureObserver | None]:
    """The runtime's observer factory: a capture per load when the node has captures on;
    `readahead(key)`: what the read-ahead had done when that load began (ReadAhead.at_load)."""

    def make(runtime: Runtime) -> CaptureObserver | None:
        if not store.load_attempts.enabled:
            return None
        return CaptureObserver(store, runtime, readahead=readahead)

    return make
