"""Queue position and ETA of every waiting request in one lane (pure: no I/O, no clock).

The serve order comes from replaying the one decision itself (`policy.decide()` and
`loaded_for()`, in both residency modes) on a snapshot of the lane, as if nothing else arrived
and each granted request finished before the next decision. The ETA walks that order with
measured figures only:

- each swap as `swap_cost` counts it (`step_seconds`): the runtimes the replayed decision stops
  for a load (in both residency modes: each load step's `evicts`) drain (their running requests
  run at once: the youngest one's remaining time), save their KV cache and stop, together (the
  slowest counts); then the load and the KV restore, less what a stop or load under way took;
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

from router.domain import ANONYMOUS, Caller
from router.runtime import fair
from router.runtime import policy as one
from router.runtime.policy import Phase, ResidentView, WaiterView, decide, loaded_for
from router.runtime.scheduler import LaneView
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
    caller: Caller = ANONYMOUS  # who sent it (its class and cap: fair.py)


@dataclass(frozen=True)
class Resident:
    """One runtime in the lane as the decision sees it, with its configuration id."""

    view: ResidentView
    model: str
    loading_elapsed: float = 0.0  # seconds its load has taken (phase LOADING)
    running_for: float = 0.0  # seconds the youngest of its running requests has run
    stopping_for: float = 0.0  # seconds its KV save and stop have taken (phase STOPPING)
    sleeps: bool = False  # a swap puts it to sleep instead of stopping it (vLLM)
    waking: bool = False  # phase LOADING: woken from a sleep, not launched

    def leaving(self) -> Evicted:
        """This runtime as a load's victim: what it still has to do before it is gone."""
        return Evicted(
            self.model, self.view.leases, self.running_for, self.stopping_for, self.sleeps
        )


@dataclass(frozen=True)
class LaneState:
    """The lane at the snapshot: its runtimes, and for each waiting runtime key the runtimes
    its load must see gone first (its victims); `exclusive`: one runtime per lane, so every
    load's victims are all the lane's runtimes; `asleep`: the waiting runtime keys that are
    asleep (vLLM), which a load wakes instead of launching."""

    residents: tuple[Resident, ...] = ()
    victims: Mapping[str, frozenset[str]] = field(default_factory=dict)
    exclusive: bool = False
    asleep: frozenset[str] = frozenset()
    running: Mapping[str, int] = field(default_factory=dict)  # leases held per caller name
    served: Mapping[str, int] = field(default_factory=dict)  # per caller: its last grant's number


def lane_now(
    view: LaneView,
    active_model: str | None = None,
    loading_elapsed: float = 0.0,
    *,
    running_for: float = 0.0,
    stopping_for: float = 0.0,
) -> LaneState:
    """A lane that holds one runtime (`runtime.residency: lane`) described by its `LaneView`."""
    if view.phase is Phase.EMPTY or view.active is None:
        return LaneState(exclusive=True)
    resident = ResidentView(view.active, view.phase, view.leases, view.draining, view.free)
    model = active_model or ""
    occupant = Resident(resident, model, loading_elapsed, running_for, stopping_for)
    return LaneState((occupant,), exclusive=True)


@dataclass(frozen=True)
class Policy:
    max_batch_wait: float
    order: one.QueueOrder = "grouped"
    max_bypass: int | None = None
    max_in_flight: int | None = None  # per runtime (None or 0: no cap)
    interactive_guard: float = 0.0
    batch_promote_after: float | None = None


@dataclass(frozen=True)
class Step:
    """What the lane does next in the replay."""

    kind: str  # "load" (begins), "finish_load", "drain" (running work ends), "serve", "wait"
    model: str | None = None
    count: int = 0  # drain: requests running
    index: int = -1  # serve: the entry's index in the snapshot
    elapsed: float = 0.0  # finish_load: seconds that load has already taken
    evicts: tuple[Evicted, ...] = ()  # load: the runtimes that leave for it first
    running_for: float = 0.0  # drain: seconds the youngest running request has run
    woken: bool = False  # finish_load: a wake from a sleep, not a launch
    seconds: float = 0.0  # wait: until the clock alone changes it (policy.clock_deadlines)


class _Replay:
    """The lane as the replay moves it: `decide()` on each state, its answer applied as the
    pump would, every granted request finishing before the next decision."""

    def __init__(self, lane: LaneState, queued: Sequence[Queued], now: float, policy: Policy):
        self.lane, self.queued, self.now = lane, queued, now
        self.rules = one.Policy(
            policy.max_batch_wait,
            policy.order,
            policy.max_bypass,
            policy.interactive_guard,
            policy.batch_promote_after,
        )
        self.cap = policy.max_in_flight or None
        self.running = dict(lane.running)  # the callers' running requests (their caps)
        self.served = dict(lane.served)  # the callers' last grants (the round robin)
        self.residents = {r.view.key: r for r in lane.residents}
        self.left = list(range(len(queued)))
        self.bypassed = {i: q.bypassed for i, q in enumerate(queued)}
        self.pending: dict[str, tuple[frozenset[str], float]] = {}  # load -> (victims, since)
        self.leaving: dict[str, Evicted] = {}  # gone since: the loads they left for wait
        self.steps: list[Step] = []

    def waiters(self, *, counted: bool = True) -> list[WaiterView]:
        return [
            WaiterView(
                self.queued[i].key,
                self.queued[i].enqueued_at,
                self.bypassed[i] if counted else 0,
                self.queued[i].caller,
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
        urgent = self.urgent_victims()
        views = tuple(
            replace(
                r.view, victim_since=since[k], urgent_victim=r.view.urgent_victim or k in urgent
            )
            for k, r in self.residents.items()
        )
        snapshot = one.Snapshot(views, self.waiters(), self.now, self.rules)
        return replace(snapshot, running=self.running, served=self.served)

    def urgent_victims(self) -> set[str]:
        """The runtimes a load pended in the replay stops for an interactive request."""
        promote = self.rules.batch_promote_after
        out: set[str] = set()
        for key, (victims, _) in self.pending.items():
            mine = [self.queued[i] for i in self.left if self.queued[i].key == key]
            if any(fair.urgent(q, self.now, promote) for q in mine):
                out |= victims
        return out

    def step(self) -> bool:
        """One decision applied; False when nothing more can happen."""
        snapshot = self.snapshot()
        d = decide(snapshot)
        if d.grant:
            self.serve(d.grant, one.passed(snapshot, [i for i, _ in d.grant]))
            return True
        if d.drain or d.stop or d.undrain:
            self.leave(d)
            return True
        if d.load is not None and self.load(d.load):
            return True
        return self.time_passes()

    def serve(self, grant: tuple[tuple[int, str], ...], passed: list[int]) -> None:
        for i, count in zip(self.left, passed, strict=True):
            self.bypassed[i] += count
        served = [self.left[g] for g, _ in grant]
        self.running = {}  # served ones finish before the next decision, the running ones too
        last = max(self.served.values(), default=0)
        for n, i in enumerate(served, start=1):
            self.served[self.queued[i].caller.name] = last + n
        self.steps += [Step("serve", self.queued[i].model, index=i) for i in served]
        self.left = [i for i in self.left if i not in served]
        for key in {k for _, k in grant}:  # served ones finish before the next decision
            r = self.residents[key]
            self.residents[key] = replace(r, view=replace(r.view, leases=0, free=self.cap))

    def leave(self, d: one.Decision) -> None:
        for key in d.undrain:
            r = self.residents[key]
            self.residents[key] = replace(r, view=replace(r.view, draining=False))
        for key in d.drain | d.stop:  # its running work ends first, then it saves and stops
            self.leaving[key] = self.residents.pop(key).leaving()

    def load(self, key: str) -> bool:
        """The load of `key` begins once its victims are gone; False when it waits."""
        waited: frozenset[str] | None = None  # the victims it pended for (None: it did not)
        if key in self.pending:
            waited, _ = self.pending[key]
            if waited & self.residents.keys():
                return False
            del self.pending[key]
        victims = self.victims_of(key) & self.residents.keys()
        if victims:
            since = min(self.queued[i].enqueued_at for i in self.left if self.queued[i].key == key)
            self.pending[key] = (victims, since)
            return True
        model = next(self.queued[i].model for i in self.left if self.queued[i].key == key)
        gone = [k for k in self.leaving if waited is None or k in waited]
        self.steps.append(Step("load", model, evicts=tuple(self.leaving.pop(k) for k in gone)))
        view = ResidentView(key, Phase.LOADING, 0, False, self.cap)
        self.residents[key] = Resident(view, model, waking=key in self.lane.asleep)
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
                self.steps.append(
                    Step("finish_load", r.model, elapsed=r.loading_elapsed, woken=r.waking)
                )
                view = replace(r.view, phase=Phase.READY, ready_at=self.now)
                self.residents[key] = replace(r, view=view, loading_elapsed=0.0, waking=False)
                waiters = self.waiters(counted=False)
                promote, counts = self.rules.batch_promote_after, (self.running, self.served)
                serve = fair.serve_order(waiters, self.now, promote, counts)
                firsts = loaded_for(waiters, key, self.rules.order, self.running, self.cap, serve)
                first = [self.left[g] for g in firsts]
                self.steps += [Step("serve", self.queued[i].model, index=i) for i in first]
                self.left = [i for i in self.left if i not in first]
                return True
        for key, r in self.residents.items():
            if r.view.phase is not Phase.READY:  # stopping: gone once it has exited
                self.leaving[key] = self.residents.pop(key).leaving()
                return True
        for key, r in self.residents.items():
            if r.view.leases:
                self.steps.append(Step("drain", r.model, r.view.leases, running_for=r.running_for))
                view = replace(r.view, leases=0, free=self.cap)
                self.residents[key] = replace(r, view=view, running_for=0.0)
                self.running = {}
                return True
        return self.clock_passes()

    def clock_passes(self) -> bool:
        """Nothing runs: the next event is the clock's (an interactive guard lapses, a batch
        request is promoted), or there is none (a caller's cap holds only work that ended)."""
        if self.running:
            self.running = {}
            return True
        later = [d for d in one.clock_deadlines(self.snapshot()) if d > self.now]
        if not later:
            return False
        self.steps.append(Step("wait", seconds=min(later) - self.now))
        self.now = min(later)
        return True


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
    (seconds until it is granted, `None` when a needed figure is missing). Stops, KV saves and
    restores cost nothing here; `ranked(..., timings=)` counts them."""
    return [row for _, row in ranked(lane, queued, now, policy, load_seconds, request_seconds)]


def ranked(
    lane: LaneState,
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
            cost = step_seconds(step, timings)
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


def step_seconds(step: Step, timings: Timings, running_for: float | None = None) -> float | None:
    """What one replayed step costs (swap_cost): a served request its usual time, a drain the
    rest of the running requests (`running_for`: the youngest one's age, else the step's), a
    load the eviction of its victims, the end of a load what is left of it and its KV restore
    (of a wake: the wake)."""
    model = step.model or ""
    if step.kind == "serve":
        return timings.request.get(model)
    if step.kind == "drain":
        age = step.running_for if running_for is None else running_for
        return drain_seconds(timings, model, step.count, age)
    if step.kind == "load":
        return eviction_seconds(timings, step.evicts)
    if step.kind == "finish_load":
        return load_seconds(timings, model, step.elapsed, step.woken)
    return step.seconds


def _row(entry: Queued, position: int, now: float, eta: float | None) -> dict[str, Any]:
    return {
        "model": entry.model,
        "key": entry.caller.name,
        "class": entry.caller.priority.value,
        "position": position,
        "waiting_s": round(max(0.0, now - entry.enqueued_at), 3),
        "eta_s": None if eta is None else round(eta, 1),
    }
