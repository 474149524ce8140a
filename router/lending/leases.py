"""Leases (docs/lending.md, "Leases"): the master's permission for an owner to lend over one
link, for `scheduling_grant_ttl` on the monotonic clock unless renewed. Pure: the table is
plain state; the caller passes `now` and records the decision rows the table's answers imply.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

OwnerKey = tuple[str, str, str]  # lane, owner node, owner model


class LeaseKey(NamedTuple):
    """One link's identity: a lease is keyed by it (one lease per link at a time)."""

    lane: str
    owner_node_id: str
    owner_model_id: str
    helper_node_id: str
    helper_model_id: str


@dataclass(frozen=True, slots=True)
class Lease:
    lane: str
    owner_node_id: str
    owner_model_id: str
    helper_node_id: str
    helper_model_id: str
    load_helper_model: bool
    restore_helper_model: bool
    helper_slots: int
    probe: bool
    expires: float  # monotonic
    ttl_ms: int

    @property
    def key(self) -> LeaseKey:
        return LeaseKey(
            self.lane,
            self.owner_node_id,
            self.owner_model_id,
            self.helper_node_id,
            self.helper_model_id,
        )

    @property
    def owner(self) -> OwnerKey:
        return (self.lane, self.owner_node_id, self.owner_model_id)

    def terms(self) -> tuple[bool, bool, int, bool]:
        """What a renewal may change without it being news (the expiry is not a term)."""
        return (self.load_helper_model, self.restore_helper_model, self.helper_slots, self.probe)

    def to_dict(self, in_use: int, now: float, wall: float | None = None) -> dict[str, Any]:
        left = max(0.0, self.expires - now)
        return {
            "lane": self.lane,
            "owner_node_id": self.owner_node_id,
            "owner_model_id": self.owner_model_id,
            "helper_node_id": self.helper_node_id,
            "helper_model_id": self.helper_model_id,
            "load_helper_model": self.load_helper_model,
            "restore_helper_model": self.restore_helper_model,
            "helper_slots": self.helper_slots,
            "in_use": in_use,
            "probe": self.probe,
            "expires_at": round((time.time() if wall is None else wall) + left, 3),
            "ttl_ms": int(left * 1000),
        }


class LeaseTable:
    """The leases in force and how many of each one's slots are taken. Every method is
    synchronous: a check and the act it decides happen with no await between them."""

    def __init__(self) -> None:
        self.leases: dict[LeaseKey, Lease] = {}
        self.in_use: dict[LeaseKey, int] = {}

    def put(self, lease: Lease) -> bool:
        """Grant or renew; True when that is news (a new lease or changed terms)."""
        old = self.leases.get(lease.key)
        self.leases[lease.key] = lease
        return old is None or old.terms() != lease.terms()

    def clear(self, key: LeaseKey) -> Lease | None:
        """Remove one lease; requests already out over it keep their slot until they end."""
        return self.leases.pop(key, None)

    def expire(self, now: float) -> list[Lease]:
        gone = [lease for lease in self.leases.values() if lease.expires <= now]
        for lease in gone:
            del self.leases[lease.key]
        return gone

    def live(self, owner: OwnerKey, now: float) -> list[Lease]:
        return [v for v in self.leases.values() if v.owner == owner and v.expires > now]

    def take(
        self, owner: OwnerKey, now: float, fits: Callable[[Lease], bool] = lambda _: True
    ) -> Lease | None:
        """A live lease of `owner` with a free slot that `fits` the request, its slot taken:
        the one with the most free slots (ties: the first granted)."""
        best: Lease | None = None
        free = 0
        for lease in self.live(owner, now):
            left = lease.helper_slots - self.in_use.get(lease.key, 0)
            if left > free and fits(lease):
                best, free = lease, left
        if best is not None:
            self.in_use[best.key] = self.in_use.get(best.key, 0) + 1
        return best

    def release(self, key: LeaseKey) -> None:
        count = self.in_use.get(key, 0) - 1
        if count > 0:
            self.in_use[key] = count
        else:
            self.in_use.pop(key, None)

    def owners(self) -> set[OwnerKey]:
        return {lease.owner for lease in self.leases.values()}

    def rows(self, now: float) -> list[dict[str, Any]]:
        return [
            lease.to_dict(self.in_use.get(key, 0), now)
            for key, lease in sorted(self.leases.items())
        ]


def renewed(lease: Lease, now: float, ttl_s: float) -> Lease:
    return replace(lease, expires=now + ttl_s, ttl_ms=int(ttl_s * 1000))


class Holding:
    """Requests this router holds for linked owners, and those out on helpers, per owner.
    `needs`: the context (tokens) each held text request needs, for the plan's gate."""

    def __init__(self) -> None:
        self.held: dict[OwnerKey, list[int]] = {}
        self.lent: dict[OwnerKey, int] = {}
        self.relaying: dict[OwnerKey, int] = {}  # slave owners: relayed there, not yet ended
        self.started: dict[LeaseKey, list[float]] = {}  # lent over a lease: when (monotonic)
        self.looks = 0  # how often held requests looked at their owner (the tests count them)

    def hold(self, owner: OwnerKey, need: int) -> None:
        self.held.setdefault(owner, []).append(need)

    def unhold(self, owner: OwnerKey, need: int) -> None:
        needs = self.held.get(owner, [])
        if need in needs:
            needs.remove(need)
        if not needs:
            self.held.pop(owner, None)

    def count(self, table: dict[OwnerKey, int], owner: OwnerKey, step: int) -> None:
        value = table.get(owner, 0) + step
        if value > 0:
            table[owner] = value
        else:
            table.pop(owner, None)

    def by_node(self, nodes: Iterable[str]) -> list[dict[str, Any]]:
        out = []
        for node in nodes:
            held = sum(len(v) for k, v in self.held.items() if k[1] == node)
            lent = sum(v for k, v in self.lent.items() if k[1] == node)
            out.append({"node_id": node, "held": held, "lent": lent})
        return out


class Wakeups:
    """What a held request waits on, per owner: one shared future, resolved by `notify` when
    something that may let it go happens (a lease granted, renewed or cleared, a lent
    request's slot freed, an owner job finished). Every request held for that owner then
    looks again; nothing else wakes it (no timer but its own bound)."""

    def __init__(self) -> None:
        self._next: dict[OwnerKey, asyncio.Future[None]] = {}
        self.woken = 0  # waits ended by a notify (the tests count them)

    def notify(self, owner: OwnerKey) -> None:
        future = self._next.pop(owner, None)
        if future is not None and not future.done():
            future.set_result(None)

    async def wait(self, owner: OwnerKey, bound: float | None) -> bool:
        """Until `owner`'s next notify (True) or `bound` seconds (False). A waiter that goes
        away (its client did) leaves the shared future to the others."""
        if bound is not None and bound <= 0:
            return False
        future = self._next.get(owner)
        if future is None:
            future = self._next[owner] = asyncio.get_running_loop().create_future()
        done, _ = await asyncio.wait((future,), timeout=bound)
        if done:
            self.woken += 1
        return bool(done)


class LendBook:
    """The lending state of one router: leases (the master's), what it holds and has lent,
    its own cost fits, and the planner's coalescing and change tracking."""

    def __init__(self) -> None:
        self.table = LeaseTable()
        self.holding = Holding()
        self.wakeups = Wakeups()
        self.costs: tuple[Any, ...] = ()  # this node's own CostFit rows (router/lending/costs.py)
        # (helper node, lane) -> monotonic time its own work was last seen
        self.busy_seen: dict[tuple[str, str], float] = {}
        self.last_rows: dict[LeaseKey, tuple[str, tuple[str, ...]]] = {}
        self.running: dict[OwnerKey, Any] = {}  # owner -> its planning task
        self.pending: dict[OwnerKey, str] = {}  # owner -> the trigger of the one queued run
        self.fetching: dict[str, Any] = {}  # node -> the status poll under way (a future)
        self.probed: dict[LeaseKey, float] = {}  # link -> monotonic time its last probe went
        self.started = time.monotonic()  # a helper never seen busy is idle since then
