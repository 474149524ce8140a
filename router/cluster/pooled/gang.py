"""vLLM's multi-node gang (docs/cluster.md, "vLLM multi-node"): one model over the master's
vLLM (the head, rank 0, which serves the API) and one headless follower per node named in
`router_vllm_nodes` (ranks 1.. in that order), started by vLLM's own multiprocessing
executor, no Ray. Every process takes `--nnodes`, its `--node-rank` and the head's
`--master-addr/--master-port`; followers add `--headless` (no API server). Pure: the flags,
their checks and each node's share of the bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from router.cluster.pooled.split import NodeRoom, NoRoom, Share
from router.config.pooled import cluster_address
from router.errors import LeaseRefused

MAX_NODES = 17  # the head and at most 16 followers (router_vllm_nodes' own limit)


@dataclass(frozen=True)
class GangFlags:
    """One rank's place in the gang, as vLLM's argv takes it."""

    nnodes: int
    rank: int
    master_addr: str
    master_port: int

    def argv(self) -> list[str]:
        flags = ["--nnodes", str(self.nnodes), "--node-rank", str(self.rank)]
        flags += ["--master-addr", self.master_addr, "--master-port", str(self.master_port)]
        return flags if self.rank == 0 else ["--headless", *flags]

    def body(self) -> dict[str, Any]:
        """The lease request's part naming the follower's place."""
        return {
            "nnodes": self.nnodes,
            "node_rank": self.rank,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
        }


def follower_flags(nnodes: Any, rank: Any, master_addr: Any, master_port: Any) -> GangFlags:
    """A master's lease request checked before anything of it reaches a follower's argv: whole
    numbers in range, a follower's rank (never the head's), the head's address an IP literal
    of one interface (never a wildcard, a name or an option)."""
    numbers = (nnodes, rank, master_port)
    if any(isinstance(n, bool) or not isinstance(n, int) for n in numbers):
        raise LeaseRefused("nnodes, node_rank and master_port must be whole numbers")
    if not 2 <= nnodes <= MAX_NODES:
        raise LeaseRefused(f"nnodes must be 2 to {MAX_NODES}, not {nnodes}")
    if not 1 <= rank < nnodes:
        raise LeaseRefused(f"a follower's node_rank is 1 to {nnodes - 1}, not {rank}")
    if not 1024 <= master_port <= 65535:
        raise LeaseRefused(f"master_port {master_port} is no unprivileged port")
    if not isinstance(master_addr, str):
        raise LeaseRefused("master_addr must be the head's IP address")
    try:
        address = cluster_address(master_addr)
    except ValueError as err:
        raise LeaseRefused(f"master_addr {master_addr[:64]!r} is refused: {err}") from None
    return GangFlags(nnodes, rank, address, master_port)


def shares(part: int, nodes: Sequence[str], rooms: Sequence[NodeRoom]) -> tuple[Share, ...]:
    """Each follower's bytes: one rank's `part` (memory/estimate.gang_share: its part of the
    weights, which vLLM divides evenly over the ranks, beside its own KV space and process;
    the head is admitted by the same part). Every named node must have the room for it: a
    gang has no smaller shape (503 naming the nodes short of room)."""
    part = max(0, part)
    free = {room.node_id: room.free for room in rooms}
    short = [f"{node} ({free.get(node, 0)} free)" for node in nodes if free.get(node, 0) < part]
    if short:
        raise NoRoom(f"each vLLM follower needs {part} bytes; short of room: {', '.join(short)}")
    return tuple(Share(node, part) for node in nodes)


@dataclass(frozen=True)
class GangPlan:
    """The master's plan for one load: its followers' shares (rank = index + 1) and the
    head's rendezvous address and port."""

    shares: tuple[Share, ...]
    master_addr: str
    master_port: int

    @property
    def nnodes(self) -> int:
        return len(self.shares) + 1

    def flags(self, rank: int) -> GangFlags:
        return GangFlags(self.nnodes, rank, self.master_addr, self.master_port)

    def lease_body(self, rank: int) -> dict[str, Any]:
        return {"kind": "vllm", **self.flags(rank).body()}

    def launch_args(self, leases: Sequence[object]) -> list[str]:
        """The head's flags (its followers run already, one per lease)."""
        return self.flags(0).argv()

    def row(self, index: int, lease: object) -> dict[str, Any]:
        rank = index + 1
        return {
            "device": f"vLLM rank {rank}",
            "endpoint": None,
            "used": self.shares[index].bytes,
            "layers": None,
            "node_rank": rank,
        }

    def answer(self) -> dict[str, Any]:
        return {
            "engine": "vllm",
            "nnodes": self.nnodes,
            "nodes": [
                {"node_id": s.node_id, "bytes": s.bytes, "node_rank": rank, "evicts": []}
                for rank, s in enumerate(self.shares, start=1)
            ],
        }


__all__ = ["MAX_NODES", "GangFlags", "GangPlan", "follower_flags", "shares"]
