"""What the queue ETA (eta.py, swap_cost.py) reads from the manager's live runtimes, as plain
values taken at one moment: each part's usual time per configuration and what a runtime that
must leave still has to do."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from router.records.request_times import RequestTimes
from router.records.swap_times import SwapTimes
from router.runtime.state import Runtime, RuntimeState
from router.runtime.swap_cost import Evicted, Timings


def running_for(runtime: Runtime, now: float) -> float:
    """Seconds the youngest running request of `runtime` has run (`now`: the manager's clock)."""
    return max(0.0, now - max(runtime.lease_starts)) if runtime.lease_starts else 0.0


def evicted(runtime: Runtime, now: float, wall: float) -> Evicted:
    """`runtime` as a victim: its running requests, and how far its stop has got (`wall`:
    time.time(), the clock of `Runtime.since`)."""
    stopping = runtime.state is RuntimeState.STOPPING
    return Evicted(
        runtime.config.id,
        runtime.leases,
        running_for(runtime, now),
        max(0.0, wall - runtime.since) if stopping else 0.0,
    )


def timings(
    models: Iterable[str],
    usual_load: Callable[[str], float | None],
    requests: RequestTimes,
    swaps: SwapTimes,
    kv_on: bool,
) -> Timings:
    """Every figure the replay may need; save and restore cost nothing without KV persistence."""
    loads = {m: u for m in models if (u := usual_load(m)) is not None}
    return Timings(
        loads,
        requests.figures(),
        swaps.save.figures() if kv_on else None,
        swaps.stop.figures(),
        swaps.restore.figures() if kv_on else None,
    )


__all__ = ["evicted", "running_for", "timings"]
