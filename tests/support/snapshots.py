"""Node snapshots for the cluster's pure tests: what a node states about itself and its models."""

from __future__ import annotations

from router.cluster import PROTOCOL_VERSION, NodeModel, Snapshot


def model(local_id: str, h: str = "m1", c: str = "c1", **kw: object) -> NodeModel:
    return NodeModel(local_id=local_id, model_hash=h, config_hash=c, **kw)  # type: ignore[arg-type]


def snap(node_id: str, url: str, *models: NodeModel, protocol: int = PROTOCOL_VERSION) -> Snapshot:
    return Snapshot(protocol=protocol, node_id=node_id, node_url=url, models=models)
