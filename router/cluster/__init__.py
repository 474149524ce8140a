"""The cluster: master and slave routers behind one URL (docs/cluster.md).

Today this package holds the pure parts, tested without sockets: URL normal form and the
allow-list, the wire snapshot, identity merging, replica and speech-to-text choice, and the
registry that owns every node's state. The node client, the node routes and forwarding build on
them.
"""

from router.cluster.client import NodeClient, PeerError
from router.cluster.identity import PublicModel, Replica, merge, public_image_id
from router.cluster.protocol import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    NodeModel,
    RuntimeStatus,
    Snapshot,
    protocol_problem,
)
from router.cluster.registry import NodeEntry, Registry, RemoteNode
from router.cluster.replicas import SttNode, choose_replica, choose_stt_node
from router.cluster.service import ClusterService, Target
from router.cluster.urls import AllowList, normalize_base_url

__all__ = [
    "MIN_PROTOCOL_VERSION",
    "PROTOCOL_VERSION",
    "AllowList",
    "ClusterService",
    "Target",
    "NodeClient",
    "NodeEntry",
    "NodeModel",
    "PeerError",
    "PublicModel",
    "Registry",
    "RemoteNode",
    "Replica",
    "RuntimeStatus",
    "Snapshot",
    "SttNode",
    "choose_replica",
    "choose_stt_node",
    "merge",
    "normalize_base_url",
    "protocol_problem",
    "public_image_id",
]
