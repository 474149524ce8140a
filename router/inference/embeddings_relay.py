"""Selectorless embeddings on a master: which node's loaded runtime takes the request.

The contract: with no model selector, round-robin over the healthy *loaded* configurations that
advertise an embedding component, cluster aliases of one runtime counted once; with none
loaded, pass through to the default embedding backend (router/runtime/default_embedding.py);
never a load. This node's own runtimes count like any other, and its own default embedding
backend goes before another node's (no hop). With nothing anywhere, this node answers
(router/inference/selectorless.py; docs/decisions.md, "Selectorless embeddings").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiohttp import web

from router.appkeys import CLUSTER, RUNTIMES, SETTINGS
from router.cluster import (
    ClusterService,
    EmbeddingRuntime,
    NodeModel,
    RuntimeStatus,
    Target,
    choose_embedding_runtime,
)
from router.domain import BackendMode, Lane
from router.inference.relay import target_on
from router.runtime.default_embedding import may_pass_through, passthrough_views

# Ollama's embedding routes are translated to this backend path on every node.
_BACKEND_PATH = {"/api/embed": "/v1/embeddings", "/api/embeddings": "/v1/embeddings"}


async def embeddings_target(request: web.Request) -> Target | None:
    """The remote node's runtime this request goes to, or None when this node serves it."""
    if request.app[SETTINGS].cluster.role != "master":
        return None
    service = request.app[CLUSTER]
    own = service.registry.own_node
    path, method = _BACKEND_PATH.get(request.path, request.path), request.method
    views = request.app[RUNTIMES].views()
    loaded = [
        EmbeddingRuntime(own, v.config.id, local=True)
        for v in views
        if v.ready and v.active and Lane.EMBEDDINGS in v.occupies
    ]
    capable = _capable(service, path, method)
    statuses = await service.runtime_statuses(sorted(capable)) if capable else {}
    default: list[EmbeddingRuntime] = []
    for node_id, status in statuses.items():
        if status is not None:
            found, passing = _remote(node_id, status, capable[node_id])
            loaded += found
            default += passing
    turn = service.embeddings_turn()
    chosen = choose_embedding_runtime(loaded, turn)
    if chosen is None and not passthrough_views(views, path, method):
        chosen = choose_embedding_runtime(default, turn)
    if chosen is None or chosen.local:
        return None
    return target_on(service, chosen.node_id, chosen.local_id)


def _capable(service: ClusterService, path: str, method: str) -> dict[str, list[NodeModel]]:
    """Per healthy other node: its models that could take the request once loaded there."""
    out = {}
    for entry in service.registry.nodes():
        if entry.node_id and entry.healthy and entry.node_id != service.registry.own_node:
            models = [m for m in entry.models if _embeds(m) or _default(m, path, method)]
            if models:
                out[entry.node_id] = models
    return out


def _remote(
    node_id: str, status: RuntimeStatus, models: Iterable[NodeModel]
) -> tuple[list[EmbeddingRuntime], list[EmbeddingRuntime]]:
    """A node's loaded embedding runtimes, and its runtimes that may be the default embedding
    backend. A peer that does not report its ready lanes: its loaded embedding
    configurations, as before (never a default)."""
    lanes: Mapping[str, tuple[str, ...]] = status.ready_lanes or {}
    loaded, default = [], []
    for model in models:
        held = lanes.get(model.local_id, ())
        if status.ready_lanes is None:
            if _embeds(model) and model.local_id in status.loaded_models:
                loaded.append(EmbeddingRuntime(node_id, model.local_id))
        elif Lane.EMBEDDINGS.value in held and _embeds(model):
            loaded.append(EmbeddingRuntime(node_id, model.local_id))
        elif Lane.TEXT.value in held and not _embeds(model):
            default.append(EmbeddingRuntime(node_id, model.local_id))
    return loaded, default


def _embeds(model: NodeModel) -> bool:
    return Lane.EMBEDDINGS in model.lanes


def _default(model: NodeModel, path: str, method: str) -> bool:
    """Could this model's text runtime be the default embedding backend for `method path`?"""
    try:
        mode = BackendMode(model.backend_mode or "")
    except ValueError:
        return False  # a mode this build does not know
    return may_pass_through(model.lanes, mode, Lane.TEXT, path, method)
