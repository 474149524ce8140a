"""A `vllm` lease on the lender (router/cluster/pooled/lender.py and follower.py), with the
fake vLLM run by the real supervisor as a headless follower: the lease runs one follower
with the node's own file and the master's place for it, counts in the ledger, and a reclaim
ends it at its deadline as an RPC lease's: the master is asked once, the follower stops and
the ledger gets the bytes back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psutil

from router.cluster.pooled.follower import VllmFollowers
from router.cluster.pooled.gang import GangFlags
from router.cluster.pooled.lease import LeaseKind, RpcLease
from router.cluster.pooled.lender import LeaseAsk, Lender
from router.config import ModelConfig, Settings, parse_kcpps
from router.config.pooled import PooledSection
from router.config.schema import VllmSection
from router.domain import BackendMode
from tests.cluster.test_pooled_lender_reclaim import Memory
from tests.fakes.wrappers import write_fake_binary
from tests.support.router_process import gone

PLACE = GangFlags(2, 1, "127.0.0.1", 50999)


def _files(folder: Path) -> tuple[Settings, ModelConfig]:
    raw = {"backend_mode": "vllm", "model_param": str(folder / "big"), "contextsize": 512}
    config = parse_kcpps(folder / "big.kcpps", json.dumps(raw).encode(), BackendMode.VLLM)
    section = VllmSection(binary_path=write_fake_binary(folder, "vllm"))
    return Settings().model_copy(update={"vllm": section}), config


async def test_a_reclaimed_vllm_lease_stops_its_follower_at_the_deadline(tmp_path: Path) -> None:
    settings, config = _files(tmp_path)
    section = PooledSection(lend=True, bind="127.0.0.1", lease_ttl=600, reclaim_timeout=1)
    memory = Memory()
    pids = tmp_path / "pids"
    pids.mkdir()
    lender = Lender(section, "s1", memory, tmp_path / "state", pids)
    found = {config.id: config}
    lender.start_follower = VllmFollowers(settings, found.get, pids).start
    asked: list[RpcLease] = []

    async def ask_master(lease: RpcLease) -> None:
        asked.append(lease)

    lender.ask_master = ask_master
    try:
        ask = LeaseAsk("m", "s1", "big", 1 << 20, kind=LeaseKind.VLLM, gang=PLACE)
        lease = await lender.grant(ask)
        assert lease.kind is LeaseKind.VLLM and lease.port is None
        key = f"rpc:{lease.lease_id}"
        assert memory.lent == {key: 1 << 20}
        (row,) = lender.rows()
        assert row["kind"] == "vllm" and row["endpoint"] is None
        argv = psutil.Process(row["pid"]).cmdline()
        assert argv[argv.index("--model") + 1] == str(tmp_path / "big")
        assert PLACE.argv() == argv[argv.index("--headless") : argv.index("--headless") + 9]
        for _ in range(3):  # the lease's timer starts its sleep to the lifetime's end
            await asyncio.sleep(0)
        lender.reclaim([key])
        lender.reclaim([key])  # asked once
        await asyncio.wait_for(memory.unlent.wait(), 60)  # bounded far below lease_ttl
        assert [a.lease_id for a in asked] == [lease.lease_id]
        assert lender.leases == {} and memory.lent == {} and gone(row["pid"])
    finally:
        await lender.close()
