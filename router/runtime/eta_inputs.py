"""What the queue ETA (eta.py, swap_cost.py) reads from the manager's live runtimes, as plain
values taken at one moment: each part's usual time per configuration and how far each runtime
in the lane has got (its load, its youngest running request, its stop)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from router.records.request_times import RequestTimes
from router.records.swap_times import SwapTimes
from router.runtime.eta import Resident
from router.runtime.policy import Phase, ResidentView
from router.runtime.state import Runtime
from router.runtime.swap_cost import Timings


def running_for(runtime: Runtime, now: float) -> float:
    """Seconds the youngest running request of `runtime` has run (`now`: the manager's clock)."""
    return max(0.0, now - max(runtime.lease_starts)) if runtime.lease_starts else 0.0


def resident(
    view: ResidentView, runtime: Runtime, now: float, wall: float, sleeps: bool = False
) -> Resident:
    """`runtime` as the replay sees it (`now`: the manager's clock; `wall`: time.time(), the
    clock of `Runtime.since`, when its state last changed; `sleeps`: a swap would put it to
    sleep rather than stop it)."""
    since = max(0.0, wall - runtime.since)
    return Resident(
        view,
        runtime.config.id,
        since if view.phase is Phase.LOADING else 0.0,
        running_for(runtime, now),
        since if view.phase is Phase.STOPPING else 0.0,
        sleeps,
        runtime.waking,
    )


def timings(
    models: Iterable[str],
    usual_load: Callable[[str], float | None],
    requests: RequestTimes,
    swaps: SwapTimes,
    hooked: bool,
) -> Timings:
    """Every figure the replay may need; save and restore cost nothing without swap hooks
    (and without them nothing sleeps or wakes)."""
    loads = {m: u for m in models if (u := usual_load(m)) is not None}
    return Timings(
        loads,
        requests.figures(),
        swaps.save.figures() if hooked else None,
        swaps.stop.figures(),
        swaps.restore.figures() if hooked else None,
        swaps.sleep.figures(),
        swaps.wake.figures(),
    )


__all__ = ["resident", "running_for", "timings"]
