"""The cluster: master and slave routers behind one URL (docs/cluster.md).

The pure parts, tested without sockets: URL normal form and the allow-list (`urls`), the wire
snapshot (`protocol`), identity merging (`identity`), replica and speech-to-text choice
(`replicas`), the registry that owns every node's state (`registry`) and guardian assignments
(`guardians`). On them: the node client (`client`), this node's own records (`local`), the
addressing of a node's inference route (`node_requests`) and `ClusterService`, the master's
polls and the slave's registration (`service`). The node routes and the master's relays are
handlers (router/api/node); lending between nodes is router/lending.
"""

from router.cluster.client import NodeClient, PeerError, PeerUnreachable
from router.cluster.fit import Fit, fit_of
from router.cluster.guardians import (
    Assignment,
    GuardianTable,
    carries_images,
    has_vision,
    parse_assignment,
    parse_key,
)
from router.cluster.identity import PublicModel, Replica, merge, public_image_id
from router.cluster.local import node_models, snapshot
from router.cluster.memory import NodeMemory, devices_of, read_node_memory, resident_of
from router.cluster.node_requests import Asked, node_headers, node_path_qs
from router.cluster.protocol import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    DeviceMemory,
    NodeModel,
    RuntimeMemory,
    RuntimeStatus,
    Snapshot,
    protocol_problem,
)
from router.cluster.registry import NodeEntry, Registry
from router.cluster.replicas import (
    EmbeddingRuntime,
    SttNode,
    choose_embedding_runtime,
    choose_replica,
    choose_stt_node,
)
from router.cluster.service import ClusterService, Target
from router.cluster.urls import AllowList, listener_url, normalize_base_url

__all__ = [
    "Asked",
    "DeviceMemory",
    "Fit",
    "NodeMemory",
    "RuntimeMemory",
    "fit_of",
    "read_node_memory",
    "devices_of",
    "resident_of",
    "listener_url",
    "MIN_PROTOCOL_VERSION",
    "PROTOCOL_VERSION",
    "AllowList",
    "EmbeddingRuntime",
    "Assignment",
    "ClusterService",
    "GuardianTable",
    "NodeClient",
    "NodeEntry",
    "NodeModel",
    "PeerError",
    "PeerUnreachable",
    "PublicModel",
    "Registry",
    "Replica",
    "RuntimeStatus",
    "Snapshot",
    "SttNode",
    "Target",
    "carries_images",
    "choose_embedding_runtime",
    "choose_replica",
    "choose_stt_node",
    "has_vision",
    "merge",
    "node_headers",
    "node_models",
    "node_path_qs",
    "normalize_base_url",
    "parse_assignment",
    "parse_key",
    "protocol_problem",
    "public_image_id",
    "snapshot",
]
