"""Queue position and ETA of every waiting request in one lane (pure: no I/O, no clock).

The serve order comes from replaying the one decision itself (`policy.decide()` and
`loaded_for()`, in both residency modes) on a snapshot of the lane, as if nothing else arrived
and each granted request finished before the next decision. The ETA walks that order with measured figures only:

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
from dataclasses import dataclass, field, replace
from typing import Any

from router.runtime import policy as one
from router.runtime.policy import Phase, ResidentView, WaiterView, bypasses, decide, loaded_for
from router.runtime.scheduler import LaneView


@dataclass(frozen=True)
class Queued:
    """One queue entry: a request, or a blocked load (`request` False; it gets no position)."""

    key: str  # runtime key
    model: str  # configuration id (the figures' key)
    enqueued_at: float
    bypassed: int = 0
    request: bool = True


@dataclass(frozen=True)
class Resident:
    """One runtime in the lane as the decision sees it, with its configuration id."""

    view: ResidentView
    model: str
    loading_elapsed: float = 0.0  # seconds its load has taken (phase LOADING)


@dataclass(frozen=True)
class LaneState:
    """The lane at the snapshot: its runtimes, and for each waiting runtime key the runtimes
    its load must see gone first (its victims); `exclusive`: one runtime per lane, so every
    load's victims are all the lane's runtimes."""

    residents: tuple[Resident, ...] = ()
    victims: Mapping[str, frozenset[str]] = field(default_factory=dict)
    exclusive: bool = False


def lane_now(
    view: LaneView, active_model: str | None = None, loading_elapsed: float = 0.0
) -> LaneState:
    """A lane that holds one runtime (`runtime.residency: lane`) described by its `LaneView`."""
    if view.phase is Phase.EMPTY or view.active is None:
        return LaneState(exclusive=True)
    resident = ResidentView(view.active, view.phase, view.leases, view.draining, view.free)
    return LaneState((Resident(resident, active_model or "", loading_elapsed),), exclusive=True)


@dataclass(frozen=True)
class Policy:
    max_batch_wait: float
    order: one.QueueOrder = "grouped"
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


class _Replay:
    """The lane as the replay moves it: `decide()` on each state, its answer applied as the
    pump would, every granted request finishing before the next decision."""

    def __init__(self, lane: LaneState, queued: Sequence[Queued], now: float, policy: Policy):
        self.lane, self.queued, self.now = lane, queued, now
        self.rules = one.Policy(policy.max_batch_wait, policy.order, policy.max_bypass)
        self.cap = policy.max_in_flight or None
        self.residents = {r.view.key: r for r in lane.residents}
        self.left = list(range(len(queued)))
        self.bypassed = {i: q.bypassed for i, q in enumerate(queued)}
        self.pending: dict[str, tuple[frozenset[str], float]] = {}  # load -> (victims, since)
        self.steps: list[Step] = []

    def waiters(self, *, counted: bool = True) -> list[WaiterView]:
        return [
            WaiterView(
                self.queued[i].key, self.queued[i].enqueued_at, self.bypassed[i] if counted else 0
            )
            for i in self.left
        ]

    def snapshot(self) -> one.Snapshot:
        """The decision's input; a runtime is a victim from the snapshot (the pump's pending
        plans), of a load pended in the replay, or, one runtime per lane, of any waiter for
        another runtime (the lane's forced victim)."""
        since = {k: r.view.victim_since for k, r in self.residents.items()}
        marks = [(victims, at) for victims, at in self.pending.values()]
        others = [self.queued[i].enqueued_at for i in self.left if self.queued[i].key not in since]
        if self.lane.exclusive and others:
            marks.append((frozenset(since), min(others)))
        for victims, at in marks:
            for key in victims & since.keys():
                known = since[key]
                since[key] = at if known is None else min(known, at)
        views = tuple(replace(r.view, victim_since=since[k]) for k, r in self.residents.items())
        return one.Snapshot(views, self.waiters(), self.now, self.rules)

    def step(self) -> bool:
        """One decision applied; False when nothing more can happen."""
        d = decide(self.snapshot())
        if d.grant:
            self.serve(d.grant)
            return True
        if d.drain or d.stop or d.undrain:
            self.leave(d)
            return True
        if d.load is not None and self.load(d.load):
            return True
        return self.time_passes()

    def serve(self, grant: tuple[tuple[int, str], ...]) -> None:
        indexes = tuple(i for i, _ in grant)
        for i, passed in zip(self.left, bypasses(len(self.left), indexes), strict=True):
            self.bypassed[i] += passed
        served = [self.left[g] for g in indexes]
        self.steps += [Step("serve", self.queued[i].model, index=i) for i in served]
        self.left = [i for i in self.left if i not in served]
        for key in {k for _, k in grant}:  # served ones finish before the next decision
            r = self.residents[key]
            self.residents[key] = replace(r, view=replace(r.view, leases=0, free=self.cap))

    def leave(self, d: one.Decision) -> None:
        for key in d.undrain:
            r = self.residents[key]
            self.residents[key] = replace(r, view=replace(r.view, draining=False))
        for key in d.drain | d.stop:
            r = self.residents[key]
            if r.view.leases:  # its running work ends first
                self.steps.append(Step("drain", r.model, count=r.view.leases))
            self.residents.pop(key)

    def load(self, key: str) -> bool:
        """The load of `key` begins once its victims are gone; False when it waits."""
        if key in self.pending:
            victims, _ = self.pending[key]
            if victims & self.residents.keys():
                return False
            del self.pending[key]
        victims = self.victims_of(key) & self.residents.keys()
        if victims:
            since = min(self.queued[i].enqueued_at for i in self.left if self.queued[i].key == key)
            self.pending[key] = (victims, since)
            return True
        model = next(self.queued[i].model for i in self.left if self.queued[i].key == key)
        self.steps.append(Step("load", model))
        view = ResidentView(key, Phase.LOADING, 0, False, self.cap)
        self.residents[key] = Resident(view, model)
        return True

    def victims_of(self, key: str) -> frozenset[str]:
        if self.lane.exclusive:
            return frozenset(self.residents)
        return self.lane.victims.get(key, frozenset())

    def time_passes(self) -> bool:
        """Nothing to decide now: the next event is a load finishing, a stop ending or
        running work ending."""
        for key, r in self.residents.items():
            if r.view.phase is Phase.LOADING:
                self.steps.append(Step("finish_load", r.model, elapsed=r.loading_elapsed))
                self.residents[key] = replace(
                    r, view=replace(r.view, phase=Phase.READY), loading_elapsed=0.0
                )
                first = [
                    self.left[g]
                    for g in loaded_for(self.waiters(counted=False), key, self.rules.order)
                ]
                self.steps += [Step("serve", self.queued[i].model, index=i) for i in first]
                self.left = [i for i in self.left if i not in first]
                return True
        for key, r in self.residents.items():
            if r.view.phase is not Phase.READY:  # stopping: gone once it has exited
                del self.residents[key]
                return True
        for key, r in self.residents.items():
            if r.view.leases:
                self.steps.append(Step("drain", r.model, count=r.view.leases))
                self.residents[key] = replace(r, view=replace(r.view, leases=0, free=self.cap))
                return True
        return False


def serve_steps(
    lane: LaneState, queued: Sequence[Queued], now: float, policy: Policy
) -> list[Step]:
    """The replay of the one decision (policy.decide): every entry of `queued` appears in
    exactly one `serve` step."""
    replay = _Replay(lane, queued, now, policy)
    for _ in range(6 * len(queued) + 8 * (len(lane.residents) + 1)):
        if not replay.left or not replay.step():
            break
    leftover = [Step("serve", queued[i].model, index=i) for i in replay.left]  # never lost
    return replay.steps + leftover


def estimate(
    lane: LaneState,
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
    lane: LaneState,
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
