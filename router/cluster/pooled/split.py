"""Which nodes lend memory to one model, how many bytes each, and the layer split that keeps
every device inside its share (docs/cluster.md, "Pooled memory"). Pure: the caller passes
the ledgers' free bytes; nothing here reads a clock, a file or the network.

llama.cpp places the last `-ngl` layers (the output layer counts as one more) on its offload
devices, RPC devices first in `--rpc` order, then the host's own accelerators, and divides
them by `-ts` proportions; the layers before stay on the host's CPU. A worker has no memory
cap of its own, so a share holds only through the split the master hands llama-server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from router.errors import ServiceUnavailable

AUTO = "auto"
NodeChoice = Literal["auto"] | tuple[str, ...]


@dataclass(frozen=True)
class NodeRoom:
    """What one lending node can lend now: its ledger's free bytes under its lending cap."""

    node_id: str
    free: int


@dataclass(frozen=True)
class Share:
    node_id: str
    bytes: int


class NoRoom(ServiceUnavailable):
    """The nodes cannot cover what does not fit on this one (503 naming what is missing)."""

    code = "no_pooled_room"


def choose_nodes(
    need: int, rooms: Sequence[NodeRoom], choice: NodeChoice, unit: int = 1
) -> tuple[Share, ...]:
    """The fewest nodes whose free bytes cover `need`, the largest first (ties by node id),
    each share at most its node's free bytes. `choice` is `auto` (any lending node) or the
    node ids the model names: an unknown one is refused by name. With `unit` (a layer's
    bytes) shares are whole units: `need` is rounded up, each node's room down."""
    if need <= 0:
        return ()
    unit = max(1, unit)
    need = -(-need // unit) * unit
    rooms = [NodeRoom(r.node_id, r.free // unit * unit) for r in rooms]
    by_id = {room.node_id: room for room in rooms}
    if choice == AUTO:
        pool = list(rooms)
    else:
        missing = [node for node in choice if node not in by_id]
        if missing:
            raise NoRoom(f"lending node(s) not available: {', '.join(missing)}")
        pool = [by_id[node] for node in dict.fromkeys(choice)]
    # The k largest rooms cover the most any k rooms can: greedy by size gives the fewest.
    ordered = sorted((r for r in pool if r.free > 0), key=lambda r: (-r.free, r.node_id))
    shares: list[Share] = []
    left = need
    for room in ordered:
        if left <= 0:
            break
        take = min(room.free, left)
        shares.append(Share(room.node_id, take))
        left -= take
    if left > 0:
        free = sum(r.free for r in ordered)
        raise NoRoom(f"the lending nodes have {free} bytes free, {need} are needed")
    return tuple(shares)


@dataclass(frozen=True)
class LayerSplit:
    """The layers the host's CPU keeps and each share's node holds (in `--rpc` order): as
    llama-server arguments, `-ngl` (the offloaded count) and `-ts` (the per-node counts as
    proportions). The host's own accelerators get none: its part stays on its CPU."""

    host_layers: int
    node_layers: tuple[int, ...]

    def argv(self) -> list[str]:
        offloaded = str(sum(self.node_layers))
        return ["-ngl", offloaded, "-ts", ",".join(map(str, self.node_layers))]


def split_layers(
    layers: int, layer_bytes: int, host_room: int, shares: Sequence[Share]
) -> LayerSplit:
    """`layers` counts the output layer too; each holds about `layer_bytes` (weights and its
    KV). A node takes whole layers inside its share only; the host keeps the rest and must
    have the room for them."""
    if layers <= 0 or layer_bytes <= 0:
        raise ValueError("a split needs at least one layer of a positive size")
    node_layers: list[int] = []
    left = layers
    for share in shares:
        count = min(left, share.bytes // layer_bytes)
        node_layers.append(count)
        left -= count
    if left * layer_bytes > host_room:
        raise NoRoom(
            f"{left} layer(s) of {layer_bytes} bytes stay on this node, "
            f"which has {host_room} bytes free"
        )
    return LayerSplit(left, tuple(node_layers))


__all__ = [
    "AUTO",
    "LayerSplit",
    "NoRoom",
    "NodeChoice",
    "NodeRoom",
    "Share",
    "choose_nodes",
    "split_layers",
]
