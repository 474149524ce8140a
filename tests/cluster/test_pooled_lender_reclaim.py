"""The lender's side of a reclaim (router/cluster/pooled/lender.py), with a stand-in RPC
server program (it only listens on the port it is given) run by the real supervisor: a lease
the node's own load needs turns reclaiming, its master is asked once, a renewal answers
without moving its end, and at the reclaim deadline (far before the lease's own lifetime) the
server stops, the port closes and the ledger gets the bytes back. A master that answers it
holds no runtime on the lease (409) ends it at once; any other failure leaves the deadline."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from router.cluster.client import PeerError
from router.cluster.pooled.lease import LeaseState, RpcLease
from router.cluster.pooled.lender import LeaseAsk, Lender
from router.cluster.pooled.ports import open_ports
from router.config.pooled import PooledSection
from tests.support.pooled import port_range

LISTEN = """
import signal, socket, sys
args = sys.argv[1:]
sock = socket.socket()
sock.bind((args[args.index("-H") + 1], int(args[args.index("-p") + 1])))
sock.listen()
signal.pause()
"""


class Memory:
    def __init__(self) -> None:
        self.lent: dict[str, int] = {}
        self.unlent = asyncio.Event()

    def lend(self, key: str, model: str, device: str, size: int) -> None:
        self.lent[key] = size

    def unlend(self, key: str) -> None:
        self.lent.pop(key, None)
        self.unlent.set()

    def free(self, device: str) -> int:
        return 1 << 30


def _program(folder: Path) -> Path:
    script = folder / "listen.py"
    script.write_text(LISTEN)
    program = folder / "ggml-rpc-server"
    program.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    program.chmod(0o755)
    return program


def _lender(tmp_path: Path, reclaim_timeout: float) -> tuple[Lender, Memory, tuple[int, int]]:
    low, high = port_range()
    section = PooledSection(
        lend=True,
        bind="127.0.0.1",
        port_min=low,
        port_max=high,
        lease_ttl=600,  # the lease itself would live ten minutes
        reclaim_timeout=reclaim_timeout,
        binary_path=_program(tmp_path),
    )
    memory = Memory()
    (tmp_path / "pids").mkdir()
    lender = Lender(section, "s1", memory, tmp_path / "state", tmp_path / "pids")
    return lender, memory, (low, high)


async def test_a_reclaimed_lease_asks_its_master_once_and_ends_at_the_deadline(
    tmp_path: Path,
) -> None:
    lender, memory, (low, high) = _lender(tmp_path, reclaim_timeout=1)
    asked: list[RpcLease] = []

    async def ask_master(lease: RpcLease) -> None:
        asked.append(lease)

    lender.ask_master = ask_master
    try:
        lease = await lender.grant(LeaseAsk("m", "s1", "big", 1 << 20))
        key = f"rpc:{lease.lease_id}"
        assert memory.lent == {key: 1 << 20} and open_ports(low, high)
        for _ in range(3):  # the lease's timer starts its sleep to the lifetime's end
            await asyncio.sleep(0)
        lender.reclaim([key, "rpc:unknown"])
        lender.reclaim([key])  # the pump asks again while the load waits: asked once
        renewed = lender.renew(lease.lease_id, "m")
        assert renewed.state is LeaseState.RECLAIMING
        assert renewed.expires <= lease.expires - 500  # the deadline, not the lifetime
        assert [row["state"] for row in lender.rows()] == ["reclaiming"]
        await asyncio.wait_for(memory.unlent.wait(), 60)  # bounded far below lease_ttl
        assert [a.lease_id for a in asked] == [lease.lease_id]
        assert lender.leases == {} and memory.lent == {} and not open_ports(low, high)
    finally:
        await lender.close()


async def test_a_master_that_holds_nothing_on_the_lease_ends_it_at_once(tmp_path: Path) -> None:
    """The master answers 409 (no runtime of its holds the lease): the node stops the RPC
    server and frees the bytes now, not at the ten-minute reclaim deadline."""
    lender, memory, (low, high) = _lender(tmp_path, reclaim_timeout=600)

    async def ask_master(lease: RpcLease) -> None:
        raise PeerError(409, "conflict_error", "lease_refused", "no runtime here holds it")

    lender.ask_master = ask_master
    try:
        lease = await lender.grant(LeaseAsk("m", "s1", "big", 1 << 20))
        lender.reclaim([f"rpc:{lease.lease_id}"])
        await asyncio.wait_for(memory.unlent.wait(), 60)  # bounded far below the deadline
        assert lender.leases == {} and memory.lent == {} and not open_ports(low, high)
    finally:
        await lender.close()


async def test_a_master_that_cannot_answer_keeps_the_deadline(tmp_path: Path) -> None:
    """Any other failure (the master unreachable, 503) says nothing of what it holds: the
    lease stays reclaiming, its server running, until the deadline."""
    lender, memory, (low, high) = _lender(tmp_path, reclaim_timeout=600)
    answered = asyncio.Event()

    async def ask_master(lease: RpcLease) -> None:
        answered.set()  # the lender handles the raise below in this same step
        raise PeerError(503, "service_unavailable", None, "the master is shutting down")

    lender.ask_master = ask_master
    try:
        lease = await lender.grant(LeaseAsk("m", "s1", "big", 1 << 20))
        lender.reclaim([f"rpc:{lease.lease_id}"])
        await asyncio.wait_for(answered.wait(), 60)
        assert [row["state"] for row in lender.rows()] == ["reclaiming"]
        assert memory.lent and open_ports(low, high)
    finally:
        await lender.close()
