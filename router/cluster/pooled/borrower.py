"""The master's side of pooled memory (docs/cluster.md, "Pooled memory"): for a model whose
`.kcpps` sets `router_rpc_nodes`, the part that does not fit here is leased from lending
nodes before llama-server starts, llama-server gets `--rpc` and the layer split, the leases
are renewed while it runs and released once its process is gone. A lease that cannot be
renewed (the node died, was partitioned or restarted) stops the runtime at once: llama-server
would otherwise block on the lost socket, and its own health check still answers 200.

A swap hook (router/runtime/hooks.py): `prepare_launch` leases, `launch_args` hands the
endpoints, `after_ready` starts the renewals, `gone` releases. A lending node that needs its
memory back asks (`reclaim`): the runtime holding the lease is unloaded, and `gone` releases.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from router.cluster.client import PeerError
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
from router.domain import BackendMode, Lane
from router.errors import LeaseRefused, RouterError
from router.memory.shape import ModelShape, read_shape
from router.runtime.hooks import SwapHook
from router.runtime.loader import Launched, LaunchSpec
from router.runtime.state import Runtime

log = logging.getLogger(__name__)

STOP_GRACE = 5.0
DEFAULT_CONTEXT = 4096


@dataclass(frozen=True)
class Borrowed:
    node_id: str
    node_url: str
    lease_id: str
    endpoint: str
    bytes: int
    ttl_s: float  # what the node granted (its pooled.lease_ttl may be shorter than asked)


@dataclass(frozen=True)
class PooledPlan:
    layers: int
    layer_bytes: int
    host_room: int
    shares: tuple[Share, ...]
    split: LayerSplit

    def answer(self) -> dict[str, Any]:
        """The dry run's `pooled` part: the nodes and bytes a load would lease, and what each
        node would evict for it: nothing, since a node lends only its free room (the lender
        refuses more than `room`; docs/cluster.md, "What a lease evicts")."""
        return {
            "layers": self.layers,
            "host_layers": self.split.host_layers,
            "nodes": [
                {"node_id": s.node_id, "bytes": s.bytes, "layers": n, "evicts": []}
                for s, n in zip(self.shares, self.split.node_layers, strict=True)
            ],
        }


@dataclass
class _Held:
    plan: PooledPlan
    leases: list[Borrowed] = field(default_factory=list)
    runtime: Runtime | None = None
    renewer: asyncio.Task[None] | None = None
    reclaimed: bool = False  # a node asked its memory back: unloaded once ready


def layer_bytes(shape: ModelShape, context: int) -> tuple[int, int]:
    """(layers, bytes per layer): the weights spread over the blocks and the output layer,
    plus one block's f16 KV cache for `context` tokens."""
    layers = shape.n_layer + 1
    heads = max(shape.n_head_kv, default=1)
    kv = context * heads * (shape.key_length + shape.value_length) * 2
    return layers, math.ceil(shape.tensor_bytes / layers) + kv


def spans(config: ModelConfig, lane: Lane = Lane.TEXT) -> bool:
    """Does a load of `config` on `lane` lease from lending nodes? llama.cpp's engine only:
    KoboldCpp and vLLM configs run on one box as before."""
    return (
        lane is Lane.TEXT
        and config.rpc_nodes is not None
        and config.model_file(Lane.TEXT) is not None
        and config.backend_mode is BackendMode.LLAMA_SDCPP
    )


def checked_endpoint(text: Any) -> str:
    """A node's answer goes into llama-server's argv: an IP literal and a port, nothing else."""
    if not isinstance(text, str) or ":" not in text:
        raise RouterError(f"a lending node answered no endpoint: {str(text)[:64]!r}")
    host, _, port = text.rpartition(":")
    try:
        address = ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        raise RouterError(f"a lending node answered a bad endpoint: {text[:64]!r}") from None
    if address.version != 4 or address.is_unspecified or not 0 < number < 65536:
        raise RouterError(f"a lending node answered a bad endpoint: {text[:64]!r}")
    return f"{address}:{number}"


def _granted_ttl(value: Any, asked: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= asked:
        return float(value)
    return asked


class Borrower(SwapHook):
    def __init__(
        self,
        service: ClusterService,
        host_room: Callable[[str], int],
        ttl: float,
        unload: Callable[[Runtime], Awaitable[object]],
    ) -> None:
        self._service = service
        self._host_room = host_room  # bytes free here without the runtime `key`
        self._ttl = ttl
        self._unload = unload  # the runtime manager's unload of that one runtime
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
                raise NoRoom(f"router_rpc_nodes names nodes not in the cluster: {unknown}")
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

    async def prepare_launch(self, spec: LaunchSpec) -> None:
        if spec.lane is not Lane.TEXT:
            return
        plan = await self.plan(spec.config, spec.key)
        if plan is None or not plan.shares:
            return
        held = self._held[spec.key] = _Held(plan)
        try:
            for share in plan.shares:
                held.leases.append(await self._lease(spec.config.id, share))
        except BaseException:
            self._release_later(spec.key)
            raise

    async def _lease(self, model: str, share: Share) -> Borrowed:
        entry = self._service.registry.node(share.node_id)
        if entry is None:
            raise NoRoom(f"lending node {share.node_id} left the cluster")
        body = {
            "master_id": self._service.settings.node_id,
            "node_id": share.node_id,
            "model": model,
            "bytes": share.bytes,
            "ttl_s": self._ttl,
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
            checked_endpoint(reply.get("endpoint")),
            share.bytes,
            _granted_ttl(reply.get("ttl_s"), self._ttl),
        )

    def launch_args(self, spec: LaunchSpec) -> list[str]:
        held = self._held.get(spec.key)
        if held is None or not held.leases:
            return []
        endpoints = ",".join(lease.endpoint for lease in held.leases)
        return ["--rpc", endpoints, *held.plan.split.argv()]

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
            self._service.node_failed(lease.node_url, f"its RPC lease was lost: {why}")
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
        if held is None or not held.leases:
            return None
        counts = await asyncio.gather(*(bytes_sent(lease.endpoint) for lease in held.leases))
        nodes = [
            {"node_id": lease.node_id, "endpoint": lease.endpoint, "bytes_sent": count}
            for lease, count in zip(held.leases, counts, strict=True)
        ]
        known = [count for count in counts if count is not None]
        return {"nodes": nodes, "bytes_sent": sum(known) if known else None}

    def remote(self, key: str) -> int:
        """The bytes of runtime `key`'s layers the lending nodes hold (0: it leases none)."""
        held = self._held.get(key)
        if held is None or not held.leases:
            return 0
        return sum(held.plan.split.node_layers) * held.plan.layer_bytes

    def rows(self) -> list[dict[str, Any]]:
        """The remote devices: one per lending node of each runtime that spans nodes."""
        return [
            {
                "runtime": key,
                "node_id": lease.node_id,
                "device": f"RPC{index}[{lease.endpoint}]",
                "endpoint": lease.endpoint,
                "budget": lease.bytes,
                # What its layers take of the lease (the lease rounds up to whole layers).
                "used": held.plan.split.node_layers[index] * held.plan.layer_bytes,
                "layers": held.plan.split.node_layers[index],
                "lease_id": lease.lease_id,
            }
            for key, held in self._held.items()
            for index, lease in enumerate(held.leases)
        ]


__all__ = ["Borrowed", "Borrower", "PooledPlan", "checked_endpoint", "layer_bytes", "spans"]
