"""Pooled memory over llama.cpp's RPC engine (docs/cluster.md, "Pooled memory"): one model
spread over this node and lending nodes. `split` chooses nodes and layers from the ledgers,
`lease` is the lease's state machine; both pure."""

from router.cluster.pooled.lease import LeaseKind, LeaseState, RpcLease
from router.cluster.pooled.split import (
    AUTO,
    LayerSplit,
    NodeChoice,
    NodeRoom,
    NoRoom,
    Share,
    choose_nodes,
    split_layers,
)

__all__ = [
    "AUTO",
    "LayerSplit",
    "LeaseKind",
    "LeaseState",
    "NoRoom",
    "NodeChoice",
    "NodeRoom",
    "RpcLease",
    "Share",
    "choose_nodes",
    "split_layers",
]
