"""Queue position and ETA of every waiting request in one lane (pure: no I/O, no clock).

The serve order comes from replaying the scheduler itself (`scheduler.decide()` and
`loaded_for()`) on a snapshot of the lane, as if nothing else arrived and each granted request
finished before the next decision. The ETA walks that order with measured figures only:

- each swap as `swap_cost` counts it (`step_seconds`): the drain of the requests running on
  the runtimes it stops (they run at once: the youngest one's remaining time), their KV save
  and stop, the load and the KV restore, less what a stop or load under way already took;
- the measured time one request of a configuration holds its runtime (`RequestTimes`), for each
  request served ahead.

Requests granted together (one run of `serve` steps, up to the in-flight cap) run at once: the
next step waits for the longest of them (its measured lease time includes any queueing inside
the backend). When a figure the walk needs is missing, that request's ETA and every later
one's (but those granted in the same instant) is `None`: a number is only shown when every part
of it was measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from router.runtime.scheduler import (
    LaneView,
    Phase,
    QueueOrder,
    WaiterView,
    bypasses,
    decide,
    loaded_for,
)
from router.runtime.swap_cost import (
    Evicted,
    Timings,
    drain_seconds,
    eviction_seconds,
    load_seconds,
)


@dataclass(frozen=True)
class Queued:
    """One queue entry: a request, or a blocked load (`request` False; it gets no position)."""

    key: str  # runtime key
    model: str  # configuration id (the figures' key)
    enqueued_at: float
    bypassed: int = 0
    request: bool = True


@dataclass(frozen=True)
class LaneNow:
    view: LaneView
    active_model: str | None = None
    loading_elapsed: float = 0.0  # seconds the current load has taken (phase LOADING)
    running_for: float = 0.0  # seconds the youngest running request has run (its leases)
    stopping_for: float = 0.0  # seconds the current stop has taken (phase STOPPING)
    # Several runtimes per lane: the runtimes a pending load (by runtime key) stops first.
    victims: Mapping[str, tuple[Evicted, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Policy:
    max_batch_wait: float
    order: QueueOrder = "grouped"
    max_bypass: int | None = None
    max_in_flight: int | None = None  # per runtime (None or 0: no cap)


@dataclass(frozen=True)
class Step:
    """What the lane does next in the replay."""

    kind: str  # "load" (begins), "finish_load", "drain" (running work ends), "serve"
    model: str | None = None
    count: int = 0  # drain: requests running
    index: int = -1  # serve: the entry's index in the snapshot
    elapsed: float = 0.0  # finish_load: seconds that load has already taken
    evicts: tuple[Evicted, ...] = ()  # load: the runtimes that leave for it first


def serve_steps(lane: LaneNow, queued: Sequence[Queued], now: float, policy: Policy) -> list[Step]:
    """The replay: every entry of `queued` appears in exactly one `serve` step."""
    view, active_model = lane.view, lane.active_model
    left = list(range(len(queued)))
    bypassed = {i: q.bypassed for i, q in enumerate(queued)}
    models = {q.key: q.model for q in queued}
    steps: list[Step] = []
    cap = policy.max_in_flight or None
    elapsed = lane.loading_elapsed  # only the load under way at the snapshot has begun
    leaving: list[Evicted] = []  # stopped since the last load: that load waits for them
    victims = dict(lane.victims)
    for _ in range(4 * len(queued) + 8):
        if not left:
            break
        waiters = [WaiterView(queued[i].key, queued[i].enqueued_at, bypassed[i]) for i in left]
        d = decide(
            view,
            waiters,
            now,
            policy.max_batch_wait,
            order=policy.order,
            max_bypass=policy.max_bypass,
        )
        if d.grant:
            for i, passed in zip(left, bypasses(len(left), d.grant), strict=True):
                bypassed[i] += passed
            served = [left[g] for g in d.grant]
            steps += [Step("serve", queued[i].model, index=i) for i in served]
            left = [i for i in left if i not in served]
            view = replace(view, leases=0, free=cap)  # served ones finish before the next
        elif d.drain or d.stop or d.undrain:
            if view.leases:
                steps.append(Step("drain", active_model, count=view.leases))
            if d.undrain:
                view = replace(view, draining=False, leases=0, free=cap)
            else:
                leaving += _leaving(active_model)
                view, active_model = LaneView(Phase.EMPTY, None, 0, False, cap), None
        elif d.load is not None:
            active_model = models[d.load]
            evicts = (*leaving, *victims.pop(d.load, ()))
            steps.append(Step("load", active_model, evicts=evicts))
            leaving = []
            elapsed = 0.0
            view = LaneView(Phase.LOADING, d.load, 0, False, cap)
        elif view.phase is Phase.LOADING:
            steps.append(Step("finish_load", active_model, elapsed=elapsed))
            elapsed = 0.0
            view = replace(view, phase=Phase.READY)
            waiters = [WaiterView(queued[i].key, queued[i].enqueued_at) for i in left]
            first = [left[g] for g in loaded_for(waiters, view.active or "", policy.order)]
            steps += [Step("serve", queued[i].model, index=i) for i in first]
            left = [i for i in left if i not in first]
        elif view.phase is Phase.STOPPING:
            leaving += _leaving(active_model, lane.stopping_for)
            view, active_model = LaneView(Phase.EMPTY, None, 0, False, cap), None
        elif view.leases:
            steps.append(Step("drain", active_model, count=view.leases))
            view = replace(view, leases=0, free=cap)
        else:
            break
    steps += [Step("serve", queued[i].model, index=i) for i in left]  # defensive: never lost
    return steps


def _leaving(model: str | None, stopping_for: float = 0.0) -> list[Evicted]:
    """The lane's runtime as the next load's victim (none when the lane is empty)."""
    return [Evicted(model, stopping_for=stopping_for)] if model else []


def estimate(
    lane: LaneNow,
    queued: Sequence[Queued],
    now: float,
    policy: Policy,
    load_seconds: Mapping[str, float],
    request_seconds: Mapping[str, float],
) -> list[dict[str, Any]]:
    """The lane's requests in serve order: `model`, `position` (1..n), `waiting_s`, `eta_s`
    (seconds until it is granted, `None` when a needed figure is missing). Stops, KV saves and
    restores cost nothing here; `ranked(..., timings=)` counts them."""
    return [row for _, row in ranked(lane, queued, now, policy, load_seconds, request_seconds)]


def ranked(
    lane: LaneNow,
    queued: Sequence[Queued],
    now: float,
    policy: Policy,
    load_seconds: Mapping[str, float],
    request_seconds: Mapping[str, float],
    timings: Timings | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """`estimate()`, each row with the index of its entry in `queued`; `timings` (every part
    of a swap) replaces `load_seconds` and `request_seconds` when given."""
    timings = timings or Timings(load_seconds, request_seconds)
    cap = policy.max_in_flight or None
    t: float | None = 0.0
    batch: list[float | None] = []  # the request times of the requests granted together
    rows: list[tuple[int, dict[str, Any]]] = []
    for step in serve_steps(lane, queued, now, policy):
        if step.kind != "serve":
            t, batch = _after(t, batch), []
            cost = step_seconds(step, timings, lane.running_for)
            t = None if t is None or cost is None else t + cost
            continue
        entry = queued[step.index]
        if not entry.request:
            continue  # a blocked load: it takes no position and holds no lease
        if cap is not None and len(batch) >= cap:  # the runtime takes no more at once
            t, batch = _after(t, batch), []
        rows.append((step.index, _row(entry, len(rows) + 1, now, t)))
        batch.append(step_seconds(step, timings))
    return rows


def _after(t: float | None, batch: Sequence[float | None]) -> float | None:
    """When requests granted together (in one run of serve steps, up to the in-flight cap)
    have ended: they run at once, so with the longest of them."""
    if not batch:
        return t
    if t is None or any(b is None for b in batch):
        return None
    return t + max(b or 0.0 for b in batch)


def step_seconds(step: Step, timings: Timings, running_for: float = 0.0) -> float | None:
    """What one replayed step costs (swap_cost): a served request its usual time, a drain the
    rest of the running requests, a load the eviction of its victims, the end of a load what
    is left of it and its KV restore. `running_for`: the age of the youngest running request
    (only the snapshot's running requests drain; the replay's own grants end as served)."""
    model = step.model or ""
    if step.kind == "serve":
        return timings.request.get(model)
    if step.kind == "drain":
        return drain_seconds(timings, model, step.count, running_for)
    if step.kind == "load":
        return eviction_seconds(timings, step.evicts)
    if step.kind == "finish_load":
        return load_seconds(timings, model, step.elapsed)
    return 0.0


def _row(entry: Queued, position: int, now: float, eta: float | None) -> dict[str, Any]:
    return {
        "model": entry.model,
        "position": position,
        "waiting_s": round(max(0.0, now - entry.enqueued_at), 3),
        "eta_s": None if eta is None else round(eta, 1),
    }
