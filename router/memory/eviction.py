"""The load decision (pure; docs/residency.md): which runtimes a load of one runtime must
stop, and whether it must wait. The dry run and the real load call this one function, `plan`,
so a dry run names exactly what the load right after it would evict.

`plan` first takes the runtimes the load stops whatever memory says (`forced`: the lanes it
needs, `router_unload_policy`); they come first in `evict` (the lane's own runtime, then those
the policy names). Their bytes count as free for the memory choice: the load starts only once
they have exited, so no memory is counted twice. A forced runtime already stopping is not
listed (it is leaving anyway), but the load still waits for it, as for one still loading.

Then the memory choice over the rest of the ledger (`plan_load`): a load that fits its devices'
free budget evicts nothing. Else it evicts the set of idle, unpinned, ready runtimes with the
lowest expected reload cost (measured load time x recent use) that makes it fit; a runtime a
client's `keep_alive` still holds is chosen only when no set without one fits; ties go to
fewer victims, then the least recently used. A busy runtime is never evicted while idle ones
suffice; when only busy ones (or ones already stopping) can free enough, the load waits for
them to drain (`wait: "drain"`). A pinned runtime is never chosen. A load larger than a
device's whole budget is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

from router.config.sizes import format_size
from router.errors import BadRequest
from router.memory.estimate import Estimate
from router.memory.ledger import Ledger, Resident

# Up to this many candidates every subset is tried (2^12 sets x a few devices: well under a
# millisecond); beyond it a greedy pass by cost per byte, pruned of needless victims.
EXACT_LIMIT = 12
# A never-measured runtime's reload time: 1 s plus its bytes read at 1 GiB/s.
_READ_RATE = float(1 << 30)


class MemoryRefusal(BadRequest):
    """The load cannot fit even on an empty device: a 400 in the surface's own shape."""

    code = "model_too_large"


@dataclass(frozen=True)
class Victim:
    key: str
    model: str
    lane: str
    reason: str
    busy: bool

    def answer(self) -> dict[str, str]:
        return {"model": self.model, "lane": self.lane, "reason": self.reason}


@dataclass(frozen=True)
class Plan:
    model: str
    fits: bool
    devices: tuple[dict[str, Any], ...]
    evict: tuple[Victim, ...]
    wait: Literal["none", "drain"]
    # The memory this node lends over RPC that the load would ask back (`rpc:<lease id>`,
    # largest first; `lent_to_reclaim`): set by the live ledger, empty when the load fits.
    reclaim: tuple[str, ...] = ()

    def answer(self) -> dict[str, Any]:
        """The body of `POST /router/v1/load {"dry_run": true}` (issue 25)."""
        return {
            "model": self.model,
            "fits": self.fits,
            "devices": [dict(d) for d in self.devices],
            "evict": [v.answer() for v in self.evict],
            "wait": self.wait,
        }


def reload_cost(resident: Resident) -> float:
    seconds = resident.load_seconds
    if seconds is None:
        seconds = 1.0 + resident.total / _READ_RATE
    return seconds * resident.recent_uses


def plan(
    ledger: Ledger,
    model: str,
    key: str,
    need: Estimate,
    forced: Mapping[str, str],
    *,
    act_on_memory: bool,
) -> Plan:
    """The load decision. `forced`: runtime key -> reason. With `act_on_memory` False
    (`runtime.residency: lane`) memory is reported (`fits`, `devices`) but neither refuses nor
    evicts anything."""
    current = ledger.get(key)
    if current is not None and current.state != "stopping" and key not in forced:
        return plan_load(ledger, model, key, need)  # resident: fits, nothing evicted
    leaving = [r for r in ledger.residents if r.key in forced]
    rest = Ledger(ledger.budgets, tuple(r for r in ledger.residents if r.key not in forced))
    try:
        memory = plan_load(rest, model, key, need)
    except MemoryRefusal:
        if act_on_memory:
            raise
        memory = Plan(model, False, (), (), "none")
    # The rows show the whole ledger's use, the forced victims' bytes included.
    rows = tuple(row | {"used": ledger.used(row["device"])} for row in memory.devices)
    rows = rows or _device_rows(ledger, need)
    stops = tuple(
        Victim(r.key, r.model, r.lane, forced[r.key], r.busy)
        for r in sorted(leaving, key=lambda r: (r.busy, r.last_used, r.key))
        if r.state != "stopping"
    )
    waits = any(r.busy or r.state != "ready" for r in leaving)
    evict = stops + (memory.evict if act_on_memory else ())
    drain = waits or (act_on_memory and memory.wait == "drain")
    return Plan(model, memory.fits, rows, evict, "drain" if drain else "none")


def _device_rows(ledger: Ledger, estimate: Estimate) -> tuple[dict[str, Any], ...]:
    """The dry run's `devices`: per device the load needs, its budget, use and the need."""
    return tuple(
        {
            "device": d,
            "budget": ledger.budgets.get(d, 0),
            "used": ledger.used(d),
            "estimate": b,
            "source": estimate.source,
        }
        for d, b in estimate.devices.items()
        if b > 0
    )


def plan_load(ledger: Ledger, model: str, key: str, estimate: Estimate) -> Plan:
    """The memory choice alone (no forced victims): what `plan` asks of the ledger's rest."""
    need = {d: b for d, b in estimate.devices.items() if b > 0}
    rows = _device_rows(ledger, estimate)
    current = ledger.get(key)
    if current is not None and current.state != "stopping":
        return Plan(model, True, rows, (), "none")
    refuse_if_too_large(ledger.budgets, model, need, estimate.source)
    short = {d: need[d] - ledger.free(d) for d in need}
    if all(s <= 0 for s in short.values()):
        return Plan(model, True, rows, (), "none")
    idle = [r for r in ledger.residents if _evictable(r) and not r.busy]
    chosen = _cheapest(idle, short)
    if chosen is not None:
        return Plan(model, True, rows, _victims(chosen), "none")
    # Only with busy runtimes drained, or stopping ones gone, can it fit: the load waits.
    leaving = [r for r in ledger.residents if r.state == "stopping"]
    after_exit = {d: s - sum(r.devices.get(d, 0) for r in leaving) for d, s in short.items()}
    busy = [r for r in ledger.residents if _evictable(r) and r.busy]
    chosen = _cheapest(idle + busy, after_exit)
    if chosen is None:
        return Plan(model, False, rows, (), "none")  # pinned or loading runtimes hold the rest
    return Plan(model, True, rows, _victims(chosen), "drain")


def _evictable(r: Resident) -> bool:
    return r.state == "ready" and not r.pinned


def refuse_if_too_large(
    budgets: Mapping[str, int], model: str, need: Mapping[str, int], source: str = "estimate"
) -> None:
    """Raise `MemoryRefusal` when `need` exceeds a device's whole budget (before any queueing)."""
    for device, amount in need.items():
        budget = budgets.get(device, 0)
        if amount > budget:
            raise MemoryRefusal(
                f"model {model!r} needs about {format_size(amount)} of {device} memory "
                f"({source}) but the {device} budget is {format_size(budget)}: it cannot fit "
                "even with nothing else loaded; lower its context size or raise "
                f"memory.{'host' if device == 'host' else 'gpu'}_budget",
                param="model",
            )


def _cheapest(
    candidates: Sequence[Resident], short: Mapping[str, int]
) -> tuple[Resident, ...] | None:
    if all(s <= 0 for s in short.values()):
        return ()
    pool = sorted(candidates, key=lambda r: r.key)
    if len(pool) <= EXACT_LIMIT:
        sets: Iterable[tuple[Resident, ...]] = (
            combo for n in range(1, len(pool) + 1) for combo in combinations(pool, n)
        )
        fitting = [s for s in sets if _covers(s, short)]
        return min(fitting, key=_rank) if fitting else None
    return _greedy(pool, short)


def _greedy(pool: Sequence[Resident], short: Mapping[str, int]) -> tuple[Resident, ...] | None:
    def per_byte(r: Resident) -> tuple[int, int, float, float, str]:
        freed = sum(r.devices.get(d, 0) for d, s in short.items() if s > 0)
        return (r.busy, r.kept, reload_cost(r) / max(1, freed), r.last_used, r.key)

    picked: list[Resident] = []
    for r in sorted(pool, key=per_byte):
        picked.append(r)
        if _covers(picked, short):
            break
    else:
        return None
    # Drop victims the others make needless, dearest first.
    for r in sorted(picked, key=lambda r: (-reload_cost(r), r.key)):
        rest = [p for p in picked if p is not r]
        if _covers(rest, short):
            picked = rest
    return tuple(picked)


def _covers(chosen: Iterable[Resident], short: Mapping[str, int]) -> bool:
    chosen = tuple(chosen)
    return all(sum(r.devices.get(d, 0) for r in chosen) >= s for d, s in short.items() if s > 0)


def _rank(chosen: tuple[Resident, ...]) -> tuple[Any, ...]:
    return (
        sum(r.busy for r in chosen),
        sum(r.kept for r in chosen),
        sum(reload_cost(r) for r in chosen),
        len(chosen),
        sorted(r.last_used for r in chosen),
        sorted(r.key for r in chosen),
    )


def _victims(chosen: Iterable[Resident]) -> tuple[Victim, ...]:
    # Stopped in this order: idle before busy, cheapest first, then least recently used.
    ordered = sorted(chosen, key=lambda r: (r.busy, r.kept, reload_cost(r), r.last_used, r.key))
    return tuple(Victim(r.key, r.model, r.lane, _reason(r), r.busy) for r in ordered)


def _reason(r: Resident) -> str:
    if r.busy:
        return f"busy: stops after its {r.in_flight or 'queued'} request(s) drain"
    seconds = r.load_seconds
    how = f"{seconds:.1f} s measured" if seconds is not None else "not measured yet"
    if r.kept:
        return f"idle, kept by keep_alive but nothing else frees enough; reload cost {reload_cost(r):.1f}"
    return f"idle; reload cost {reload_cost(r):.1f} (load {how} x {r.recent_uses:g} recent uses)"


def lent_to_reclaim(
    ledger: Ledger, lent: Iterable[Resident], fits: Callable[[Ledger], bool]
) -> frozenset[str]:
    """Memory lent to another node's model (pinned, never a victim) that a load waits for:
    the lent residents, largest first, whose leaving lets it fit (`fits` asks `plan` of the
    ledger without them); empty when even all of them would not do, so no lease is asked back
    for a load that would wait anyway (docs/cluster.md, "The lending node's own need")."""
    chosen: list[str] = []
    for resident in sorted(lent, key=lambda r: (-r.total, r.key)):
        ledger = ledger.exited(resident.key)
        chosen.append(resident.key)
        if fits(ledger):
            return frozenset(chosen)
    return frozenset()


__all__ = [
    "EXACT_LIMIT",
    "MemoryRefusal",
    "Plan",
    "Victim",
    "lent_to_reclaim",
    "plan",
    "plan_load",
    "refuse_if_too_large",
    "reload_cost",
]
