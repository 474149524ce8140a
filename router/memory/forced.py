"""The one load decision of the runtime manager (pure): the runtimes a load must stop whatever
memory says (the lanes it needs, `router_unload_policy`), then `plan_load` over what is left.

Forced victims come first in `evict` (the lane's own runtime, then those the policy names),
then the memory victims in `plan_load`'s order. Their bytes count as free for the memory
choice: the load starts only once they have exited, so no memory is counted twice. A forced
runtime already stopping is not listed (it is leaving anyway), but the load still waits for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.memory.estimate import Estimate
from router.memory.eviction import MemoryRefusal, Plan, Victim, plan_load
from router.memory.ledger import Ledger


def plan_with_forced(
    ledger: Ledger,
    model: str,
    key: str,
    need: Estimate,
    forced: Mapping[str, str],
    *,
    act_on_memory: bool,
) -> Plan:
    """`forced`: runtime key -> reason. With `act_on_memory` False (`runtime.residency: lane`)
    memory is reported (`fits`, `devices`) but neither refuses nor evicts anything."""
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
    rows = tuple(row | {"used": ledger.used(row["device"])} for row in _rows(ledger, need, memory))
    stops = tuple(
        Victim(r.key, r.model, r.lane, forced[r.key], r.busy)
        for r in sorted(leaving, key=lambda r: (r.busy, r.last_used, r.key))
        if r.state != "stopping"
    )
    waits = any(r.busy or r.state != "ready" for r in leaving)
    evict = stops + (memory.evict if act_on_memory else ())
    drain = waits or (act_on_memory and memory.wait == "drain")
    return Plan(model, memory.fits, rows, evict, "drain" if drain else "none")


def _rows(ledger: Ledger, need: Estimate, memory: Plan) -> tuple[dict[str, Any], ...]:
    if memory.devices:
        return tuple(dict(d) for d in memory.devices)
    return tuple(
        {
            "device": d,
            "budget": ledger.budgets.get(d, 0),
            "used": 0,
            "estimate": b,
            "source": need.source,
        }
        for d, b in need.devices.items()
        if b > 0
    )


__all__ = ["plan_with_forced"]
