"""The lending node's side of pooled memory (docs/cluster.md, "Pooled memory"): a master's
lease checked against this node's ledger, its process started through the supervisor (an RPC
server bound only to the cluster address on a free port of the configured range, or, for a
`vllm` lease, a headless vLLM follower: router/cluster/pooled/follower.py), and stopped when
the lease is released or expires. No lease, no process: every RPC server or follower this
node runs belongs to a live lease, and a lease's end stops it before anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol

from backends.base import built_backends_dir
from backends.process import SupervisedProcess
from router.cluster.client import PeerError
from router.cluster.pooled import lease as machine
from router.cluster.pooled.cache import cache_home, prune
from router.cluster.pooled.gang import GangFlags
from router.cluster.pooled.lease import LeaseKind, LeaseState, RpcLease
from router.cluster.pooled.ports import free_port, listening
from router.config.pooled import PooledSection
from router.errors import LeaseRefused, RouterError, ServiceUnavailable

log = logging.getLogger(__name__)

RPC_PROGRAMS = ("ggml-rpc-server", "rpc-server")  # the pinned name, then the older one
READY_TIMEOUT = 30.0  # the RPC server lists its devices, then listens
STOP_GRACE = 5.0
_ROUTER_ENV = "TENSOR_ROUTER_"
LENT = "rpc:"  # a lease's key in the ledger: rpc:<lease id>
AskMaster = Callable[[RpcLease], Awaitable[None]]
# Starts a headless vLLM follower for (lease id, model, its place in the gang).
StartFollower = Callable[[str, str, GangFlags], Awaitable[SupervisedProcess]]


class LentMemory(Protocol):
    """The runtime manager's ledger (router/runtime/ledger.py): what this node lends counts
    there like a pinned runtime, so its own loads plan around it."""

    def lend(self, key: str, model: str, device: str, size: int) -> None: ...
    def unlend(self, key: str) -> None: ...
    def free(self, device: str) -> int: ...


@dataclass(frozen=True)
class LeaseAsk:
    master_id: str
    node_id: str
    model: str
    bytes: int
    ttl_s: float | None = None
    port: int | None = None
    kind: LeaseKind = LeaseKind.RPC
    gang: GangFlags | None = None  # a `vllm` lease: the follower's rank and the head


def find_rpc_server(configured: Path | None) -> str | None:
    if configured is not None:
        return str(configured) if configured.exists() else None
    built = str(built_backends_dir() / "bin")
    for name in RPC_PROGRAMS:
        found = shutil.which(name) or shutil.which(name, path=built)
        if found:
            return found
    return None


def _ggml_device(device: str) -> str:
    """The ledger's device id as the RPC server's `-d` names it (CPU; CUDA<N>)."""
    return "CPU" if device == "host" else f"CUDA{device.removeprefix('gpu')}"


class Lender:
    def __init__(
        self,
        section: PooledSection,
        node_id: str,
        memory: LentMemory,
        state: Path,
        pid_dir: Path,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._section = section
        self._node_id = node_id
        self._memory = memory
        self._cache = cache_home(state)
        self._pid_dir = pid_dir
        self._clock = clock
        self.leases: dict[str, RpcLease] = {}
        self._servers: dict[str, SupervisedProcess] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()  # one grant at a time: the port and room checks hold
        # Set at wiring (router/app.py): asks a lease's master to unload what holds it.
        self.ask_master: AskMaster | None = None
        self.start_follower: StartFollower | None = None  # vLLM followers, set at wiring
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def bind(self) -> str:
        return self._section.bind

    @property
    def lends(self) -> bool:
        return self._section.lend

    # ---- the checks (no I/O) ------------------------------------------------------------

    def _live(self) -> list[RpcLease]:
        now = self._clock()
        return [lease for lease in self.leases.values() if lease.live(now)]

    def room(self) -> int:
        """What this node may lend now: its ledger's free bytes on the lent device, under
        `max_bytes` less what it lends already."""
        free = max(0, self._memory.free(self._section.device))
        cap = self._section.max_bytes
        if cap:
            free = min(free, max(0, cap - sum(lease.bytes for lease in self._live())))
        return free

    def _check(self, ask: LeaseAsk) -> None:
        section = self._section
        if not section.lend:
            raise LeaseRefused("this node does not lend memory (pooled.lend is off)")
        if ask.node_id != self._node_id:
            raise LeaseRefused(f"the lease names node {ask.node_id}; this is {self._node_id}")
        if ask.kind is LeaseKind.VLLM and (ask.gang is None or ask.port is not None):
            raise LeaseRefused("a vllm lease names its place in the gang and no port")
        holders = {lease.master_id for lease in self._live()} - {ask.master_id}
        if holders:
            raise LeaseRefused(f"this node lends to master {sorted(holders)[0]} already")
        if ask.port is not None and not section.port_min <= ask.port <= section.port_max:
            raise LeaseRefused(
                f"port {ask.port} is outside this node's RPC range "
                f"{section.port_min}-{section.port_max}"
            )
        if ask.bytes <= 0:
            raise LeaseRefused("a lease needs a positive number of bytes")
        room = self.room()
        if ask.bytes > room:
            raise LeaseRefused(f"{ask.bytes} bytes asked, this node can lend {room}")

    # ---- grant, renew, release ------------------------------------------------------------

    async def grant(self, ask: LeaseAsk) -> RpcLease:
        async with self._lock:
            self._check(ask)
            ttl = min(ask.ttl_s or self._section.lease_ttl, self._section.lease_ttl)
            lease_id = secrets.token_hex(8)
            asked = RpcLease(
                lease_id, ask.master_id, ask.node_id, ask.model, ask.bytes, ttl, kind=ask.kind
            )
            port, server = await self._run(asked, ask)
            lease = machine.grant(asked, self._clock(), port)
            self.leases[lease.lease_id] = lease
            self._servers[lease.lease_id] = server
            self._memory.lend(f"{LENT}{lease.lease_id}", ask.model, self._section.device, ask.bytes)
            self._arm(lease.lease_id)
            log.info(
                "lent %d bytes to %s for %s (%s, port %s)",
                ask.bytes,
                ask.master_id,
                ask.model,
                ask.kind.value,
                port,
            )
            return lease

    async def _run(self, lease: RpcLease, ask: LeaseAsk) -> tuple[int | None, SupervisedProcess]:
        """The lease's process: a vLLM follower, or an RPC server on a free port."""
        if ask.kind is LeaseKind.VLLM and ask.gang is not None:  # _check: always both
            if self.start_follower is None:
                raise ServiceUnavailable("this node runs no vLLM followers")
            return None, await self.start_follower(lease.lease_id, ask.model, ask.gang)
        port = self._port(ask.port)
        if not self._servers:  # no server reads the cache now: prune it to its budget
            await asyncio.to_thread(prune, self._cache, self._section.cache_budget)
        return port, await self._start(lease.lease_id, port)

    def renew(self, lease_id: str, master_id: str) -> RpcLease:
        lease = self._get(lease_id)
        self.leases[lease_id] = renewed = machine.renew(lease, master_id, self._clock())
        return renewed

    async def release(self, lease_id: str, master_id: str) -> RpcLease:
        lease = machine.release(self._get(lease_id), master_id)
        await self._end(lease)
        return lease

    # ---- the node's own need: reclaim ------------------------------------------------------

    def reclaim(self, keys: Iterable[str]) -> None:
        """This node's own load needs the bytes of these lent residents (`rpc:<lease id>`):
        each granted lease among them turns reclaiming, ending `reclaim_timeout` from now at
        the latest, and its master is asked to unload the model that holds it (whose unload
        releases the lease). A lease reclaiming already is not asked twice."""
        for key in keys:
            lease = self.leases.get(key.removeprefix(LENT))
            if lease is None or lease.state is not LeaseState.GRANTED:
                continue
            try:
                lease = machine.reclaim(lease, self._clock(), self._section.reclaim_timeout)
            except LeaseRefused:
                continue  # expired meanwhile: its timer ends it
            self.leases[lease.lease_id] = lease
            self._arm(lease.lease_id)  # the end came forward: the timer sleeps to the new one
            log.warning(
                "this node needs the %d bytes lent to %s for %s: asking it to unload",
                lease.bytes,
                lease.master_id,
                lease.model,
            )
            self._spawn(self._ask_back(lease))

    async def _ask_back(self, lease: RpcLease) -> None:
        if self.ask_master is None:
            return
        try:
            await self.ask_master(lease)
        except RouterError as err:
            if isinstance(err, PeerError) and err.status == HTTPStatus.CONFLICT:
                # The master holds no runtime on this lease (its load failed, or it unloaded
                # and the release is still on its way): nothing uses the RPC server, and
                # waiting for the reclaim deadline would only hold this node's load back.
                log.warning(
                    "master %s holds nothing on lease %s (%s): ending it now",
                    lease.master_id,
                    lease.lease_id,
                    err.message,
                )
                await self._disowned(lease.lease_id)
                return
            log.warning(
                "master %s did not take back lease %s (%s): it ends in %.0f s anyway",
                lease.master_id,
                lease.lease_id,
                err.message,
                max(0.0, lease.expires - self._clock()),
            )

    async def _disowned(self, lease_id: str) -> None:
        """End a lease its master says it does not use, unless it ended meanwhile."""
        lease = self.leases.get(lease_id)
        if lease is not None:
            await self._end(machine.release(lease, lease.master_id))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _arm(self, lease_id: str) -> None:
        old = self._timers.pop(lease_id, None)
        if old is not None:
            old.cancel()
        self._timers[lease_id] = asyncio.create_task(self._expire_at_end(lease_id))

    def _get(self, lease_id: str) -> RpcLease:
        lease = self.leases.get(lease_id)
        if lease is None:
            raise LeaseRefused(f"no lease {lease_id} on this node (expired or released)")
        return lease

    def _port(self, asked: int | None) -> int:
        taken = {lease.port for lease in self.leases.values() if lease.port is not None}
        section = self._section
        if asked is not None:
            low = high = asked
        else:
            low, high = section.port_min, section.port_max
        port = free_port(low, high, taken)
        if port is None:
            raise LeaseRefused(f"no free port in {low}-{high}")
        return port

    # ---- the RPC server -------------------------------------------------------------------

    async def _start(self, lease_id: str, port: int) -> SupervisedProcess:
        section = self._section
        binary = find_rpc_server(section.binary_path)
        if binary is None:
            raise ServiceUnavailable("no RPC server program on this node (ggml-rpc-server)")
        argv = [binary, "-H", section.bind, "-p", str(port), "-c"]
        argv += ["-d", _ggml_device(section.device)]
        if section.threads:
            argv += ["-t", str(section.threads)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(_ROUTER_ENV)}
        env["LLAMA_CACHE"] = str(self._cache)
        self._cache.mkdir(parents=True, exist_ok=True)
        server = SupervisedProcess(argv, env=env, name=f"rpc-{lease_id}", pidfile_dir=self._pid_dir)
        await server.start()
        try:
            await self._await_listening(server, port)
        except BaseException:
            await server.stop(STOP_GRACE)
            raise
        return server

    async def _await_listening(self, server: SupervisedProcess, port: int) -> None:
        """Until the port listens on the bind address (its output is block-buffered on a
        pipe, so the port is what tells), or the server exits first."""
        deadline = self._clock() + READY_TIMEOUT
        while (self._section.bind, port) not in listening():
            if server.exited.is_set():
                tail = " | ".join(server.tail(5))
                raise ServiceUnavailable(f"the RPC server exited before listening: {tail}")
            if self._clock() > deadline:
                raise ServiceUnavailable(f"the RPC server did not listen on port {port}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.exited.wait(), 0.1)

    async def _expire_at_end(self, lease_id: str) -> None:
        """Sleep to the lease's end, again after each renewal; then the lease expires."""
        while True:
            lease = self.leases.get(lease_id)
            if lease is None:
                return
            left = lease.expires - self._clock()
            if left <= 0:
                break
            await asyncio.sleep(left)
        why = "was not given back in time" if lease.state is LeaseState.RECLAIMING else "expired"
        log.warning(
            "%s lease %s of %s %s: stopping its process",
            lease.kind.value,
            lease_id,
            lease.master_id,
            why,
        )
        await self._end(machine.expire(lease, self._clock()), from_timer=True)

    async def _end(self, lease: RpcLease, *, from_timer: bool = False) -> None:
        """Stop the lease's server first, then free its memory in the ledger."""
        self.leases.pop(lease.lease_id, None)
        timer = self._timers.pop(lease.lease_id, None)
        if timer is not None and not from_timer:
            timer.cancel()
        server = self._servers.pop(lease.lease_id, None)
        try:
            if server is not None:
                await server.stop(STOP_GRACE)
        finally:
            self._memory.unlend(f"{LENT}{lease.lease_id}")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for lease in list(self.leases.values()):
            await self._end(lease)

    def named(self, keys: Iterable[str]) -> list[dict[str, Any]]:
        """The leases behind lent residents (`rpc:<lease id>`), in their order: what a dry
        run of this node's own load says it would ask back."""
        leases = (self.leases.get(key.removeprefix(LENT)) for key in keys)
        return [
            {"lease_id": x.lease_id, "master_id": x.master_id, "model": x.model, "bytes": x.bytes}
            for x in leases
            if x is not None
        ]

    def rows(self) -> list[dict[str, Any]]:
        now = self._clock()
        return [
            {
                "lease_id": lease.lease_id,
                "state": lease.state.value,
                "master_id": lease.master_id,
                "model": lease.model,
                "bytes": lease.bytes,
                "kind": lease.kind.value,
                "device": self._section.device,
                "endpoint": None if lease.port is None else f"{self._section.bind}:{lease.port}",
                "ttl_ms": int(max(0.0, lease.expires - now) * 1000),
                "pid": self._servers[lease.lease_id].pid
                if lease.lease_id in self._servers
                else None,
            }
            for lease in self.leases.values()
        ]


__all__ = ["LeaseAsk", "Lender", "LentMemory", "find_rpc_server"]
