"""Issue 35: with both classes, grouping may cost a load against fifo, whatever rule decides.

`CLASS_COST` is an arrival sequence where fifo in the fair order (interactive first) makes four
loads and every schedule that keeps the issue's rules and groups by model makes five. So the
exception of test_fair_order.py's both-classes property (grouped <= fifo + the class-rule
stops) is a property of the rules, not a choice of policy.py (docs/decisions.md, "Grouped
against fifo with both classes: the class rule's load is the requirements'"). One lane, one slot,
service 1 s, load 0.5 s, `max_batch_wait` 5 s, as test_fair_order.py's `Lane()`. The rules:

- Class order: no batch request is granted while an interactive one waits, except that a new
  runtime's first grant may be the oldest request it was loaded for, as `policy.loaded_for`
  grants (allowing it only adds schedules to those of the strict order).
- Grouping: a ready runtime whose own request of the head's class (interactive if a person
  waits) waits does not leave while the oldest request for another model has waited less
  than `max_batch_wait`.
- No idling: a free slot with requests waiting acts at once (it grants one, or its runtime
  leaves and the lane loads a waiting request's model); a runtime nobody waits for another
  model for is not stopped, and a load is only for a waiting request's model.

`outcomes()` follows every schedule these rules allow (every choice branches: which request,
grant or leave, which model), on the 0.05 s grid test_fair_order.py's simulation decides on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from router.domain import Priority
from tests.runtime.test_fair_order import B1, I1, Lane, Req, listed, simulate

# Times in hundredths of a second: exact on the grid.
SERVICE, LOAD, WINDOW = 100, 50, 500
MANY = 9  # a schedule past this many loads is counted as MANY (ping-pong ends nowhere else)

# A, loaded for the first request, serves the person's second request for A before the one
# for B (grouping: B's waited less than the window); fifo serves B's first. From 2.5 on
# grouped sits on B and fifo on A: the person's request for A at 5.0 costs grouped a load and
# ends at 6.5, fifo's at 6.0. Fifo then serves the batch request for A (nobody else waits);
# grouped, at 6.5, has a person waiting for B (since 6.2) and must leave the batch request.
CLASS_COST = listed(
    (0.0, "A", I1), (1.0, "B", I1), (1.0, "A", I1), (5.0, "A", I1), (5.5, "A", B1), (6.2, "B", I1)
)


@dataclass(frozen=True)
class Job:
    at: int
    model: str
    person: bool


@dataclass(frozen=True)
class State:
    t: int = 0
    resident: str | None = None
    ready_at: int = 0  # when the resident is (was) ready
    busy_until: int = 0  # the one slot's lease end
    waiting: frozenset[int] = frozenset()
    arrived: int = 0  # jobs queued so far, in arrival order
    loads: int = 0


def jobs_of(reqs: list[Req]) -> tuple[Job, ...]:
    ordered = sorted(reqs, key=lambda r: r.at)  # stable: arrival, then list order
    person = Priority.INTERACTIVE
    return tuple(Job(round(r.at * 100), r.model, r.caller.priority is person) for r in ordered)


class Schedules:
    """Every schedule the rules allow for `jobs`; `grouping=False` drops the grouping rule
    (then fifo's own schedule is among them), `classes=False` the class order."""

    def __init__(self, jobs: tuple[Job, ...], *, grouping: bool, classes: bool) -> None:
        self.jobs, self.grouping, self.classes = jobs, grouping, classes
        self.seen: dict[State, Counter[int]] = {}

    def loads(self, s: State = State()) -> Counter[int]:
        """How many schedules from `s` end with each number of loads."""
        if s.loads >= MANY:
            return Counter({MANY: 1})
        if s not in self.seen:
            self.seen[s] = self._follow(self._queued(s))
        return self.seen[s]

    def _follow(self, s: State) -> Counter[int]:
        choices = self._choices(s)
        if choices:
            total: Counter[int] = Counter()
            for c in choices:
                total.update(self.loads(c))
            return total
        later = [j.at for j in self.jobs[s.arrived : s.arrived + 1]]
        later += [e for e in (s.busy_until, s.ready_at) if e > s.t]
        if not later:
            assert not s.waiting, s  # no idling: nothing can be stuck
            return Counter({s.loads: 1})
        return self.loads(replace(s, t=min(later)))

    def _queued(self, s: State) -> State:
        arrived = s.arrived
        while arrived < len(self.jobs) and self.jobs[arrived].at <= s.t:
            arrived += 1
        return replace(s, waiting=s.waiting | set(range(s.arrived, arrived)), arrived=arrived)

    def _choices(self, s: State) -> list[State]:
        models = {self.jobs[i].model for i in s.waiting}
        if s.resident is None:
            return [self._load(s, m) for m in sorted(models)]
        if s.t < max(s.ready_at, s.busy_until) or not s.waiting:
            return []
        own = self._grantable(s)
        grants = [replace(s, waiting=s.waiting - {i}, busy_until=s.t + SERVICE) for i in own]
        if not self._may_leave(s):
            return grants
        return grants + [self._load(s, m) for m in sorted(models - {s.resident})]

    def _load(self, s: State, model: str) -> State:
        return replace(s, resident=model, ready_at=s.t + LOAD, loads=s.loads + 1)

    def _grantable(self, s: State) -> list[int]:
        """One of each kind (arrival, class) of the resident's waiting requests that the class
        order lets through: requests of one kind are interchangeable."""
        people = self.classes and any(self.jobs[i].person for i in s.waiting)
        own = [i for i in sorted(s.waiting) if self.jobs[i].model == s.resident]
        kinds: dict[tuple[int, bool], int] = {}
        for i in own:
            job = self.jobs[i]
            if job.person or not people:
                kinds.setdefault((job.at, job.person), i)
        if own and s.t == s.ready_at:  # a new runtime's first grant: its oldest request
            kinds.setdefault((self.jobs[own[0]].at, self.jobs[own[0]].person), own[0])
        return list(kinds.values())

    def _may_leave(self, s: State) -> bool:
        waiting = [self.jobs[i] for i in s.waiting]
        others = [j.at for j in waiting if j.model != s.resident]
        if not others:
            return False
        head = any(j.person for j in waiting)  # the head's class: a person's if one waits
        kin = [j for j in waiting if j.person == head or not self.classes]
        own = any(j.model == s.resident for j in kin)
        return not (self.grouping and own and s.t - min(others) < WINDOW)


def outcomes(reqs: list[Req], *, grouping: bool = True, classes: bool = True) -> Counter[int]:
    return Schedules(jobs_of(reqs), grouping=grouping, classes=classes).loads()


def fifo_loads(reqs: list[Req]) -> int:
    return simulate(reqs, Lane(order="fifo")).loads


def test_the_decision_loads_once_more_than_fifo_for_the_class_rule() -> None:
    grouped = simulate(CLASS_COST, Lane(max_bypass=None))
    assert (grouped.loads, grouped.held_back, fifo_loads(CLASS_COST)) == (5, 1, 4)
    assert grouped.at[2] == 1.5 and grouped.at[4] == 8.5  # A's second first; batch last


def test_every_schedule_that_groups_and_keeps_the_class_order_loads_more_than_fifo() -> None:
    loads = outcomes(CLASS_COST)
    assert min(loads) == 5 > fifo_loads(CLASS_COST), loads
    assert loads == Counter({5: 1})  # no choice is left: the decision's run is the one


def test_without_either_rule_a_schedule_matches_fifo() -> None:
    """The enumeration finds fifo's four loads once grouping or the class order is not
    required: the two rules together, not the model of the lane, cost the load."""
    assert min(outcomes(CLASS_COST, grouping=False)) == fifo_loads(CLASS_COST) == 4
    assert min(outcomes(CLASS_COST, classes=False)) == 4  # r4 served at 6.5, before r5


def test_each_request_of_the_sequence_is_needed() -> None:
    for gone in range(len(CLASS_COST)):
        fewer = CLASS_COST[:gone] + CLASS_COST[gone + 1 :]
        assert min(outcomes(fewer)) <= fifo_loads(fewer), gone
