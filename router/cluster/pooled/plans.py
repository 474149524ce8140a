"""What the master's borrower plans and holds (router/cluster/pooled/borrower.py): the leases
it got, the RPC plan (layers per node) and which configs span nodes, the engine's argv part
of each plan. No I/O here.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from router.cluster.pooled.split import LayerSplit, Share
from router.config import ModelConfig
from router.config.pooled import PooledSection
from router.domain import BackendMode, Lane
from router.errors import RouterError
from router.memory.shape import ModelShape
from router.runtime.loader import LaunchSpec


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

    def lease_body(self, rank: int) -> dict[str, Any]:
        return {}  # an RPC lease: the node picks its port and answers the endpoint

    def launch_args(self, leases: list[Borrowed]) -> list[str]:
        return ["--rpc", ",".join(lease.endpoint for lease in leases), *self.split.argv()]

    def remote(self) -> int:
        return sum(self.split.node_layers) * self.layer_bytes

    def row(self, index: int, lease: Borrowed) -> dict[str, Any]:
        return {
            "device": f"RPC{index}[{lease.endpoint}]",
            "endpoint": lease.endpoint,
            # What its layers take of the lease (the lease rounds up to whole layers).
            "used": self.split.node_layers[index] * self.layer_bytes,
            "layers": self.split.node_layers[index],
        }

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


def gang(config: ModelConfig, lane: Lane = Lane.TEXT) -> bool:
    """Does a load of `config` on `lane` start a vLLM gang over the nodes it names?"""
    return (
        lane is Lane.TEXT
        and config.vllm_nodes is not None
        and config.backend_mode is BackendMode.VLLM
    )


def gang_size(config: ModelConfig, lane: Lane = Lane.TEXT) -> int:
    """The processes a load of `config` on `lane` runs: its head and one follower per named
    node for a vLLM gang, else 1."""
    return len(config.vllm_nodes or ()) + 1 if gang(config, lane) else 1


@dataclass(frozen=True)
class GangHome:
    """The master's side of a vLLM gang: its cluster address and port range (`pooled.bind`,
    `port_min`-`port_max`: the head's rendezvous port comes from there) and one rank's part
    of a load's estimate in bytes (each follower's share, as the head's admission counts it)."""

    section: PooledSection
    need: Callable[[LaunchSpec], int]


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


def granted_ttl(value: Any, asked: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= asked:
        return float(value)
    return asked


__all__ = [
    "Borrowed",
    "GangHome",
    "PooledPlan",
    "checked_endpoint",
    "gang",
    "granted_ttl",
    "layer_bytes",
    "spans",
]
