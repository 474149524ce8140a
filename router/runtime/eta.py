"""Queue position and ETA of every waiting request in one lane (pure: no I/O, no clock).

The serve order comes from replaying the scheduler itself (`scheduler.decide()` and
`loaded_for()`) on a snapshot of the lane, as if nothing else arrived and each granted request
finished before the next decision. The ETA walks that order with measured figures only:

- the usual load time of each configuration that must load (`LoadTimes`), minus the time the
  current load has already taken;
- the measured time one request of a configuration holds its runtime (`RequestTimes`), for each
  request served ahead (and each one running when the lane must drain first).

Requests are counted one after another: when a backend serves several at once the ETA is an
upper estimate. When a figure the walk needs is missing, that request's ETA and every later
one's is `None`: a number is only shown when every part of it was measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
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


def serve_steps(lane: LaneNow, queued: Sequence[Queued], now: float, policy: Policy) -> list[Step]:
    """The replay: every entry of `queued` appears in exactly one `serve` step."""
    view, active_model = lane.view, lane.active_model
    left = list(range(len(queued)))
    bypassed = {i: q.bypassed for i, q in enumerate(queued)}
    models = {q.key: q.model for q in queued}
    steps: list[Step] = []
    cap = policy.max_in_flight or None
    elapsed = lane.loading_elapsed  # only the load under way at the snapshot has begun
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
                view, active_model = LaneView(Phase.EMPTY, None, 0, False, cap), None
        elif d.load is not None:
            active_model = models[d.load]
            steps.append(Step("load", active_model))
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
            view, active_model = LaneView(Phase.EMPTY, None, 0, False, cap), None
        elif view.leases:
            steps.append(Step("drain", active_model, count=view.leases))
            view = replace(view, leases=0, free=cap)
        else:
            break
    steps += [Step("serve", queued[i].model, index=i) for i in left]  # defensive: never lost
    return steps


def estimate(
    lane: LaneNow,
    queued: Sequence[Queued],
    now: float,
    policy: Policy,
    load_seconds: Mapping[str, float],
    request_seconds: Mapping[str, float],
) -> list[dict[str, Any]]:
    """The lane's requests in serve order: `model`, `position` (1..n), `waiting_s`, `eta_s`
    (seconds until it is granted, `None` when a needed figure is missing)."""
    return [row for _, row in ranked(lane, queued, now, policy, load_seconds, request_seconds)]


def ranked(
    lane: LaneNow,
    queued: Sequence[Queued],
    now: float,
    policy: Policy,
    load_seconds: Mapping[str, float],
    request_seconds: Mapping[str, float],
) -> list[tuple[int, dict[str, Any]]]:
    """`estimate()`, each row with the index of its entry in `queued`."""
    t: float | None = 0.0
    rows: list[tuple[int, dict[str, Any]]] = []
    for step in serve_steps(lane, queued, now, policy):
        if step.kind == "serve":
            entry = queued[step.index]
            if entry.request:
                rows.append((step.index, _row(entry, len(rows) + 1, now, t)))
                t = _plus(t, request_seconds, entry.model, 1.0)
        elif step.kind == "drain":
            t = _plus(t, request_seconds, step.model, float(step.count))
        elif step.kind == "finish_load":  # a "load" step only marks where it begins
            usual = load_seconds.get(step.model or "")
            rest = None if usual is None else max(0.0, usual - step.elapsed)
            t = None if t is None or rest is None else t + rest
    return rows


def _plus(
    t: float | None, figures: Mapping[str, float], model: str | None, times: float
) -> float | None:
    figure = figures.get(model or "")
    return None if t is None or figure is None else t + figure * times


def _row(entry: Queued, position: int, now: float, eta: float | None) -> dict[str, Any]:
    return {
        "model": entry.model,
        "position": position,
        "waiting_s": round(max(0.0, now - entry.enqueued_at), 3),
        "eta_s": None if eta is None else round(eta, 1),
    }
