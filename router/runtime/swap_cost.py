"""What a swap costs, from measured figures (pure: no I/O, no clock; docs/residency.md "ETA").

A request that waits for another model waits for the whole swap, not only for the load:

1. the runtimes the load evicts drain: their running requests end (they run at once, so the
   drain lasts as long as the youngest one still has to run: the usual request time minus
   what it has run so far);
2. each of them saves its KV cache (when KV persistence is on) and stops (TERM to exit);
3. the new runtime launches (the usual load time) and restores its KV cache.

A vLLM runtime the sleep hook would park (`router_sleep`, router/runtime/sleep.py) sleeps
instead of saving and stopping, and one asleep is woken instead of loaded: those parts cost the
measured sleep and wake times instead.

Several victims drain, save and stop at once (each its own task), so an eviction lasts as long
as its slowest victim. What has already happened is subtracted: a stop or a load under way
counts only what is left. A figure that was never measured makes the cost `None`: a number is
shown only when every part of it was measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Figure = Mapping[str, float]


@dataclass(frozen=True)
class Timings:
    """Per configuration id, the usual seconds of each part (medians of recent measurements).

    `save` and `restore` None: KV persistence is off, those parts cost nothing. `stop` None:
    stops are not counted (a caller without stop figures). `sleep` and `wake`: a vLLM sleep
    and wake, counted only for a victim that sleeps and a load that wakes (missing: None)."""

    load: Figure
    request: Figure
    save: Figure | None = None
    stop: Figure | None = None
    restore: Figure | None = None
    sleep: Figure | None = None
    wake: Figure | None = None


@dataclass(frozen=True)
class Evicted:
    """A runtime a load stops first."""

    model: str  # configuration id
    running: int = 0  # requests still running on it (they end before it stops)
    running_for: float = 0.0  # seconds the youngest of them has run
    stopping_for: float = 0.0  # seconds its save and stop have already taken (0: not begun)
    sleeps: bool = False  # put to sleep instead of stopped (vLLM `router_sleep`)


def drain_seconds(timings: Timings, model: str, running: int, running_for: float) -> float | None:
    """Until the last of `running` requests of `model` ends."""
    if running <= 0:
        return 0.0
    usual = timings.request.get(model)
    return None if usual is None else max(0.0, usual - running_for)


def _part(figure: Figure | None, model: str) -> float | None:
    """A part's usual seconds: 0 when the part is off (`figure` None), None when unmeasured."""
    return 0.0 if figure is None else figure.get(model)


def _total(*parts: float | None) -> float | None:
    return None if any(p is None for p in parts) else sum(p or 0.0 for p in parts)


def _measured(figure: Figure | None, model: str) -> float | None:
    """A part that happens for sure: None when it was never measured."""
    return None if figure is None else figure.get(model)


def leave_seconds(timings: Timings, victim: Evicted) -> float | None:
    """A drained victim's way out: its sleep, else its KV save and its stop."""
    if victim.sleeps:
        return _measured(timings.sleep, victim.model)
    return _total(_part(timings.save, victim.model), _part(timings.stop, victim.model))


def eviction_seconds(timings: Timings, victims: Sequence[Evicted]) -> float | None:
    """Until every victim has drained, saved and exited, or fallen asleep (they do so at
    once: the slowest)."""
    costs = []
    for victim in victims:
        drain = drain_seconds(timings, victim.model, victim.running, victim.running_for)
        leave = leave_seconds(timings, victim)
        left = None if leave is None else max(0.0, leave - victim.stopping_for)
        costs.append(_total(drain, left))
    if any(c is None for c in costs):
        return None
    return max((c for c in costs if c is not None), default=0.0)


def load_seconds(
    timings: Timings, model: str, elapsed: float = 0.0, woken: bool = False
) -> float | None:
    """Until a load of `model` that has taken `elapsed` seconds so far is ready to serve;
    `woken`: a sleeping runtime woken instead (no launch, no KV restore)."""
    if woken:
        whole = _measured(timings.wake, model)
    else:
        whole = _total(timings.load.get(model), _part(timings.restore, model))
    return None if whole is None else max(0.0, whole - elapsed)


def swap_seconds(
    timings: Timings,
    victims: Sequence[Evicted],
    model: str,
    elapsed: float = 0.0,
    woken: bool = False,
) -> float | None:
    """A whole swap: the victims leave, then `model` loads (and restores its KV cache) or
    wakes."""
    return _total(eviction_seconds(timings, victims), load_seconds(timings, model, elapsed, woken))


__all__ = [
    "Evicted",
    "Timings",
    "drain_seconds",
    "eviction_seconds",
    "leave_seconds",
    "load_seconds",
    "swap_seconds",
]
