"""Identity merging: every node's configurations become one list of public model IDs.

Records with the same local ID and the same model and config hashes are one public model with
several replicas (the same weights under the same settings answer alike, so a client may be sent
to any of them). Records sharing a local ID but not the hashes are different models: the first
group keeps the bare ID and the rest get `-2`, `-3`, ... in a stable order (this node's own
first, then by node ID), so IDs do not move between rebuilds of the same inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from router.cluster.protocol import NodeModel


@dataclass(frozen=True, slots=True)
class Replica:
    node_id: str
    model: NodeModel
    local: bool

    @property
    def local_id(self) -> str:
        return self.model.local_id


@dataclass(frozen=True, slots=True)
class PublicModel:
    public_id: str
    public_image_id: str | None
    replicas: tuple[Replica, ...]

    @property
    def local(self) -> Replica | None:
        """This node's replica when it is available (the merge puts it first)."""
        first = self.replicas[0]
        return first if first.local and first.model.available else None

    def available_remote(self) -> tuple[Replica, ...]:
        return tuple(r for r in self.replicas if not r.local and r.model.available)

    @property
    def head(self) -> NodeModel:
        return self.replicas[0].model

    def replica_on(self, node_id: str) -> Replica | None:
        return next((r for r in self.replicas if r.node_id == node_id), None)


def _identity(model: NodeModel) -> tuple[str, str]:
    # A record without hashes matches only itself: two unknowns are not proven equal.
    if model.model_hash is None or model.config_hash is None:
        return ("", str(id(model)))
    return (model.model_hash, model.config_hash)


def public_image_id(local_id: str, public_id: str, image_id: str | None) -> str | None:
    if image_id is None or public_id == local_id:
        return image_id
    if image_id.startswith(local_id + "-"):
        return public_id + image_id[len(local_id) :]
    return f"{public_id}-{image_id}"


def merge(own_node: str, nodes: Iterable[tuple[str, Sequence[NodeModel]]]) -> list[PublicModel]:
    """Public models from `(node_id, models)` pairs; disabled records are left out."""
    replicas = [
        Replica(node_id, model, node_id == own_node)
        for node_id, models in nodes
        for model in models
        if not model.disabled
    ]
    replicas.sort(key=lambda r: (not r.local, r.node_id, r.local_id))
    groups: dict[str, dict[tuple[str, str], list[Replica]]] = {}
    for replica in replicas:
        by_identity = groups.setdefault(replica.local_id, {})
        by_identity.setdefault(_identity(replica.model), []).append(replica)
    taken = set(groups)
    merged: list[PublicModel] = []
    for local_id, by_identity in groups.items():
        for index, members in enumerate(by_identity.values()):
            public_id = local_id if index == 0 else _suffixed(local_id, index + 1, taken)
            taken.add(public_id)
            image = public_image_id(local_id, public_id, members[0].model.local_image_id)
            merged.append(PublicModel(public_id, image, tuple(members)))
    merged.sort(key=lambda m: m.public_id)
    return merged


def _suffixed(local_id: str, n: int, taken: set[str]) -> str:
    # A real configuration may already be called `<id>-2`; the suffix skips to the next free one.
    while f"{local_id}-{n}" in taken:
        n += 1
    return f"{local_id}-{n}"


def index_by_public_id(models: Iterable[PublicModel]) -> dict[str, PublicModel]:
    return {m.public_id: m for m in models}
