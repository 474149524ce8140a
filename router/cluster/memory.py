"""A node's memory as its snapshot carries it (issue 25): the devices of its ledger, each
resident configuration's memory and each configuration's estimate.

Read from the runtime manager's own answers (`memory_now`, the snapshot GET
/router/v1/status shows, and `plan`, the dry run), never computed a second way. The service
keeps the last reading (`ClusterService.memory`) and refreshes it before each registration,
each poll round and each answer to GET /router/v1/node/models.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from router.cluster.protocol import DeviceMemory, RuntimeMemory
from router.config import ModelConfig
from router.errors import RouterError
from router.memory.eviction import Plan

log = logging.getLogger(__name__)


class MemoryReader(Protocol):
    """The runtime manager's memory answers (router/runtime/ledger.py)."""

    def memory_now(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]: ...
    async def plan(self, config: ModelConfig, lane: Any = None) -> Plan: ...


@dataclass(frozen=True)
class NodeMemory:
    """`resident`: config id -> the memory of its runtime(s); `estimates`: config id -> the
    bytes per device a load would hold; `evicts`: config id -> whether that load would stop
    another runtime first or wait for one to drain (the lane's holder under `residency: lane`,
    a policy's victims, memory's). Configurations the dry run refused are left out of both."""

    devices: tuple[DeviceMemory, ...] = ()
    resident: dict[str, RuntimeMemory] = field(default_factory=dict)
    estimates: dict[str, dict[str, int]] = field(default_factory=dict)
    evicts: dict[str, bool] = field(default_factory=dict)


def devices_of(rows: Sequence[dict[str, Any]]) -> tuple[DeviceMemory, ...]:
    return tuple(
        DeviceMemory(
            device=str(r["device"]),
            kind=str(r.get("kind", "host")),
            budget=max(0, int(r["budget"])),
            used=max(0, int(r["used"])),
            free=max(0, int(r["free"])),
        )
        for r in rows
    )


def resident_of(per_runtime: dict[str, dict[str, Any]]) -> dict[str, RuntimeMemory]:
    """Per configuration; a configuration with runtimes on two lanes sums their bytes and is
    named by the device of the larger."""
    out: dict[str, RuntimeMemory] = {}
    for usage in sorted(per_runtime.values(), key=lambda u: -int(u["bytes"])):
        model = str(usage["model"])
        seen = out.get(model)
        if seen is None:
            out[model] = RuntimeMemory(
                device=str(usage["device"]), bytes=int(usage["bytes"]), source=usage["source"]
            )
        else:
            out[model] = seen.model_copy(update={"bytes": seen.bytes + int(usage["bytes"])})
    return out


async def read_node_memory(manager: MemoryReader, configs: Iterable[ModelConfig]) -> NodeMemory:
    # The status snapshot (issue 32): a runtime whose estimate is still being read is left out
    # until it is known, rather than holding the node's snapshot.
    per_runtime, rows = manager.memory_now()
    estimates: dict[str, dict[str, int]] = {}
    evicts: dict[str, bool] = {}
    for config in configs:
        try:
            plan = await manager.plan(config)
        except RouterError as err:  # too large for any budget, files missing, shutting down
            log.debug("no estimate of %s for the snapshot: %s", config.id, err.message)
            continue
        estimates[config.id] = {str(d["device"]): int(d["estimate"]) for d in plan.devices}
        evicts[config.id] = plan_evicts(plan)
    return NodeMemory(devices_of(rows), resident_of(per_runtime), estimates, evicts)


def plan_evicts(plan: Plan) -> bool:
    """The node's verdict: its load would not start at once on free room."""
    return bool(plan.evict) or plan.wait == "drain"


__all__ = [
    "MemoryReader",
    "NodeMemory",
    "devices_of",
    "plan_evicts",
    "read_node_memory",
    "resident_of",
]
