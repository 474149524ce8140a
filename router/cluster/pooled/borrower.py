"""The master's side of pooled memory (docs/cluster.md, "Pooled memory"): for a model whose
`.kcpps` sets `router_rpc_nodes`, the part that does not fit here is leased from lending
nodes before llama-server starts, llama-server gets `--rpc` and the layer split, the leases
are renewed while it runs and released once its process is gone. A lease that cannot be
renewed (the node died, was partitioned or restarted) stops the runtime at once: llama-server
would otherwise block on the lost socket, and its own health check still answers 200.

A vLLM model whose `.kcpps` sets `router_vllm_nodes` leases one headless follower per node
the same way (router/cluster/pooled/gang.py): the followers run before its head starts, with
`--nnodes`/`--node-rank` and this node's `--master-addr/--master-port`.

A swap hook (router/runtime/hooks.py): `prepare_launch` leases, `launch_args` hands the
endpoints (or the head's gang flags), `after_ready` starts the renewals, `gone` releases. A
lending node that needs its memory back asks (`reclaim`): the runtime holding the lease is
unloaded, and `gone` releases. The plans and their argv parts are in plans.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from router.cluster.client import PeerError
from router.cluster.pooled.gang import GangPlan, shares
from router.cluster.pooled.plans import (
    Borrowed,
    GangHome,
    PooledPlan,
    checked_endpoint,
    gang,
    granted_ttl,
    layer_bytes,
    spans,
)
from router.cluster.pooled.ports import free_port
from router.cluster.pooled.reclaim import LEASES
from router.cluster.pooled.sent import bytes_sent
from router.cluster.pooled.split import (
    LayerSplit,
    NodeRoom,
    NoRoom,
    Share,
    choose_nodes,
    split_layers,
)
from router.cluster.service import ClusterService
from router.config import ModelConfig
from router.domain import Lane
from router.errors import LeaseRefused, RouterError
from router.memory.shape import read_shape
from router.runtime.hooks import SwapHook
from router.runtime.loader import Launched, LaunchSpec
from router.runtime.state import Runtime

log = logging.getLogger(__name__)

STOP_GRACE = 5.0
DEFAULT_CONTEXT = 4096


@dataclass
class _Held:
    plan: PooledPlan | GangPlan
    leases: list[Borrowed] = field(default_factory=list)
    runtime: Runtime | None = None
    renewer: asyncio.Task[None] | None = None
    reclaimed: bool = False  # a node asked its memory back: unloaded once ready


class Borrower(SwapHook):
    def __init__(
        self,
        service: ClusterService,
        host_room: Callable[[str], int],
        ttl: float,
        unload: Callable[[Runtime], Awaitable[object]],
        home: GangHome | None = None,
    ) -> None:
        self._service = service
        self._host_room = host_room  # bytes free here without the runtime `key`
        self._ttl = ttl
        self._unload = unload  # the runtime manager's unload of that one runtime
        self._home = home
        self._held: dict[str, _Held] = {}
        self._tasks: set[asyncio.Future[None]] = set()

    # ---- the plan -------------------------------------------------------------------------

    async def plan(self, config: ModelConfig, key: str) -> PooledPlan | None:
        choice = config.rpc_nodes
        model = config.model_file(Lane.TEXT)
        if choice is None or model is None or not spans(config):
            return None
        shape = await asyncio.to_thread(read_shape, str(model))
        if shape is None:
            raise NoRoom(f"{config.id}: the model is no GGUF whose layers can be split")
        context = int(config.raw.get("contextsize") or DEFAULT_CONTEXT)
        layers, size = layer_bytes(shape, context)
        room = max(0, self._host_room(key))
        rooms = await self._rooms(choice)
        shares = choose_nodes(layers * size - room, rooms, choice, unit=size)
        split = split_layers(layers, size, room, shares)
        kept = tuple(s for s, n in zip(shares, split.node_layers, strict=True) if n > 0)
        split = LayerSplit(split.host_layers, tuple(n for n in split.node_layers if n > 0))
        return PooledPlan(layers, size, room, kept, split)

    async def _rooms(self, choice: tuple[str, ...] | str) -> list[NodeRoom]:
        """Each healthy registered node's lendable bytes, asked now; a node named in the
        `.kcpps` that is not in the cluster is refused by name."""
        registry = self._service.registry
        own = self._service.settings.node_id
        if choice != "auto":
            unknown = [n for n in choice if n == own or registry.node(n) is None]
            if unknown:
                raise NoRoom(f"the model names nodes not in the cluster: {unknown}")
        entries = [e for e in registry.nodes() if e.healthy and e.node_id != own]
        if choice != "auto":
            entries = [e for e in entries if e.node_id in choice]
            down = sorted(set(choice) - {e.node_id for e in entries})
            if down:
                raise NoRoom(f"lending node(s) not available: {', '.join(down)}")

        async def room(node_id: str, url: str) -> NodeRoom | None:
            try:
                reply = await self._service.client.call("GET", url, LEASES)
            except RouterError as err:
                log.warning("lending node %s did not answer: %s", node_id, err.message)
                return None
            free = reply.get("room") if reply.get("lends") else 0
            return NodeRoom(node_id, free if isinstance(free, int) and free > 0 else 0)

        asked = await asyncio.gather(*(room(e.node_id, e.node_url) for e in entries))
        silent = [e.node_id for e, r in zip(entries, asked, strict=True) if r is None]
        if silent and choice != "auto":
            raise NoRoom(f"lending node(s) not available: {', '.join(silent)}")
        return [r for r in asked if r is not None]

    # ---- the swap hook --------------------------------------------------------------------

    async def gang_plan(self, spec: LaunchSpec) -> GangPlan:
        """The followers' shares (each node's room asked now) and the head's port."""
        nodes = spec.config.vllm_nodes or ()
        home = self._home
        if home is None:
            raise NoRoom("this router cannot start a vLLM gang (it is no master)")
        rooms = await self._rooms(nodes)
        wanted = shares(await asyncio.to_thread(home.need, spec), nodes, rooms)
        taken = {h.plan.master_port for h in self._held.values() if isinstance(h.plan, GangPlan)}
        section = home.section
        port = free_port(section.port_min, section.port_max, taken)
        if port is None:
            raise NoRoom(f"no free port in {section.port_min}-{section.port_max} for the head")
        return GangPlan(wanted, section.bind, port)

    async def prepare_launch(self, spec: LaunchSpec) -> None:
        if spec.lane is not Lane.TEXT:
            return
        plan: PooledPlan | GangPlan | None
        if gang(spec.config, spec.lane):
            plan = await self.gang_plan(spec)
        else:
            plan = await self.plan(spec.config, spec.key)
        if plan is None or not plan.shares:
            return
        held = self._held[spec.key] = _Held(plan)
        try:  # a gang's followers in rank order, all before the head starts
            for rank, share in enumerate(plan.shares, start=1):
                held.leases.append(await self._lease(spec.config.id, share, plan.lease_body(rank)))
        except BaseException:
            self._release_later(spec.key)
            raise

    async def _lease(self, model: str, share: Share, extra: dict[str, Any]) -> Borrowed:
        entry = self._service.registry.node(share.node_id)
        if entry is None:
            raise NoRoom(f"lending node {share.node_id} left the cluster")
        body = {
            "master_id": self._service.settings.node_id,
            "node_id": share.node_id,
            "model": model,
            "bytes": share.bytes,
            "ttl_s": self._ttl,
            **extra,
        }
        try:
            reply = await self._service.client.call("POST", entry.node_url, LEASES, body)
        except PeerError as err:
            raise NoRoom(f"lending node {share.node_id} refused: {err.message}") from None
        except RouterError as err:
            raise NoRoom(f"lending node {share.node_id} is unreachable: {err.message}") from None
        return Borrowed(
            share.node_id,
            entry.node_url,
            str(reply.get("lease_id")),
            "" if extra else checked_endpoint(reply.get("endpoint")),  # a follower has none
            share.bytes,
            granted_ttl(reply.get("ttl_s"), self._ttl),
        )

    def launch_args(self, spec: LaunchSpec) -> list[str]:
        held = self._held.get(spec.key)
        if held is None or not held.leases:
            return []
        return held.plan.launch_args(held.leases)

    async def after_ready(self, runtime: Runtime, launched: Launched, report: Any) -> None:
        held = self._held.get(runtime.key)
        if held is not None:
            held.runtime = runtime
            held.renewer = asyncio.create_task(self._renew(runtime.key, held))
            if held.reclaimed:  # asked back while it loaded
                self._spawn(self._give_back(runtime))

    def load_failed(self, runtime: Runtime, error: RouterError) -> bool:
        self._release_later(runtime.key)
        return False

    def gone(self, runtime: Runtime) -> None:
        self._release_later(runtime.key)

    # ---- renewals and releases ------------------------------------------------------------

    async def _renew(self, key: str, held: _Held) -> None:
        """Renew every lease at a third of its lifetime; the first that cannot be renewed
        stops the runtime (its requests end with the backend's exit, in their API's shape)."""
        master = self._service.settings.node_id
        period = min((lease.ttl_s for lease in held.leases), default=self._ttl) / 3
        while self._held.get(key) is held:
            await asyncio.sleep(period)
            for lease in held.leases:
                path = f"{LEASES}/{lease.lease_id}/renew"
                try:
                    await self._service.client.call(
                        "POST", lease.node_url, path, {"master_id": master}
                    )
                except RouterError as err:
                    await self._lost(key, held, lease, err.message)
                    return

    async def _lost(self, key: str, held: _Held, lease: Borrowed, why: str) -> None:
        if held.reclaimed:  # the node took its memory back in time: it is healthy
            log.error("lending node %s ended its lease for %s: stopping it", lease.node_id, key)
        else:
            log.error("lending node %s lost for %s (%s): stopping it", lease.node_id, key, why)
            self._service.node_failed(lease.node_url, f"its lease was lost: {why}")
        runtime = held.runtime
        if runtime is not None and runtime.process is not None:
            await runtime.process.stop(STOP_GRACE)

    # ---- a lending node's own need ---------------------------------------------------------

    def reclaim(self, lease_id: str, node_id: str) -> str:
        """Node `node_id` needs the memory of lease `lease_id` for its own load: the runtime
        holding it is unloaded (its running requests finish first) and its `gone` releases
        every lease it holds. Answers the runtime's key; refused when no runtime here holds
        that lease. The node ends the lease itself at its deadline if this takes too long."""
        found = [
            (key, held)
            for key, held in self._held.items()
            if any(b.lease_id == lease_id and b.node_id == node_id for b in held.leases)
        ]
        if not found:
            raise LeaseRefused(f"no runtime here holds lease {lease_id} of node {node_id}")
        ((key, held),) = found
        log.warning("lending node %s needs its memory back: unloading %s", node_id, key)
        if not held.reclaimed and held.runtime is not None:
            self._spawn(self._give_back(held.runtime))
        held.reclaimed = True
        return key

    async def _give_back(self, runtime: Runtime) -> None:
        try:
            await self._unload(runtime)
        except RouterError as err:  # its renewals still end it by the node's deadline
            log.error("could not unload %s for its lending node: %s", runtime.key, err.message)

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _release_later(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is None:
            return
        if held.renewer is not None and held.renewer is not asyncio.current_task():
            held.renewer.cancel()
        self._spawn(self._release(held))

    async def _release(self, held: _Held) -> None:
        master = self._service.settings.node_id
        for lease in held.leases:
            path = f"{LEASES}/{lease.lease_id}/release"
            with contextlib.suppress(RouterError):  # gone already: it expires on the node
                await self._service.client.call("POST", lease.node_url, path, {"master_id": master})

    async def close(self) -> None:
        for key in list(self._held):
            self._release_later(key)
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def sent(self, key: str) -> dict[str, Any] | None:
        """What the load of `key` sent to each lending node so far (the load capture's
        `pooled`, read once llama-server is ready); None when `key` spans no node."""
        held = self._held.get(key)
        if held is None or not held.leases or not isinstance(held.plan, PooledPlan):
            return None
        counts = await asyncio.gather(*(bytes_sent(lease.endpoint) for lease in held.leases))
        nodes = [
            {"node_id": lease.node_id, "endpoint": lease.endpoint, "bytes_sent": count}
            for lease, count in zip(held.leases, counts, strict=True)
        ]
        known = [count for count in counts if count is not None]
        return {"nodes": nodes, "bytes_sent": sum(known) if known else None}

    def remote(self, key: str) -> int:
        """The bytes of runtime `key`'s layers the lending nodes hold (0: it leases none; a vLLM
        gang's head is counted by its rank's part instead, router/runtime/holdings.py)."""
        held = self._held.get(key)
        if held is None or not held.leases or not isinstance(held.plan, PooledPlan):
            return 0
        return held.plan.remote()

    def rows(self) -> list[dict[str, Any]]:
        """The remote devices: one per lending node of each runtime that spans nodes."""
        return [
            {
                "runtime": key,
                "node_id": lease.node_id,
                "budget": lease.bytes,
                "lease_id": lease.lease_id,
                **held.plan.row(index, lease),
            }
            for key, held in self._held.items()
            for index, lease in enumerate(held.leases)
        ]


__all__ = [
    "Borrowed",
    "Borrower",
    "GangHome",
    "PooledPlan",
    "checked_endpoint",
    "gang",
    "layer_bytes",
    "spans",
]
