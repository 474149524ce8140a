"""Selectorless embeddings on a master: which node's loaded embedding runtime takes the request.

The contract: with no model selector, round-robin over the healthy *loaded* configurations that
advertise an embedding component, cluster aliases of one runtime counted once; never a load.
This node's own runtime counts like any other; when none is loaded anywhere the local rule
answers (docs/decisions.md, "Selectorless embeddings").
"""

from __future__ import annotations

from aiohttp import web

from router.api.node.inference_relay import target_on
from router.appkeys import CLUSTER, RUNTIMES, SETTINGS
from router.cluster import EmbeddingRuntime, Target, choose_embedding_runtime
from router.domain import Lane


async def embeddings_target(request: web.Request) -> Target | None:
    """The remote node's runtime this request goes to, or None when this node serves it."""
    if request.app[SETTINGS].cluster.role != "master":
        return None
    service = request.app[CLUSTER]
    capable = {
        e.node_id: {m.local_id for m in e.models if Lane.EMBEDDINGS in m.lanes}
        for e in service.registry.nodes()
        if e.node_id and e.healthy and e.node_id != service.registry.own_node
    }
    capable = {node: ids for node, ids in capable.items() if ids}
    own = service.registry.own_node
    runtimes = [
        EmbeddingRuntime(own, v.config.id, local=True)
        for v in request.app[RUNTIMES].views()
        if v.ready and v.active and Lane.EMBEDDINGS in v.config.lanes
    ]
    if capable:
        statuses = await service.runtime_statuses(sorted(capable))
        for node_id, status in statuses.items():
            loaded = set(status.loaded_models) if status is not None else set()
            runtimes += [EmbeddingRuntime(node_id, i) for i in loaded & capable[node_id]]
    chosen = choose_embedding_runtime(runtimes, service.embeddings_turn())
    if chosen is None or chosen.local:
        return None
    return target_on(service, chosen.node_id, chosen.local_id)
