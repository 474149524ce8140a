"""The master's listings: models that live only on other nodes, beside this node's own.

This node's configurations keep their IDs (they sort first when identities are merged), so the
listings add what has no local replica. Clients see public IDs only; `/router/v1/models` also
shows the node, hashes, availability and replicas.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from router.appkeys import CLUSTER, SETTINGS
from router.cluster import PublicModel, RuntimeMemory
from router.domain import Lane

TEXT_SIDE = frozenset({Lane.TEXT, Lane.EMBEDDINGS})


def remote_only(request: web.Request, lanes: frozenset[Lane] | None = None) -> list[PublicModel]:
    if request.app[SETTINGS].cluster.role != "master":
        return []
    out = []
    for public in request.app[CLUSTER].public_models():
        if any(r.local for r in public.replicas):
            continue
        if lanes is None or lanes & set(public.head.lanes):
            out.append(public)
    return out


def find_remote(request: web.Request, public_id: str) -> PublicModel | None:
    return next((p for p in remote_only(request) if p.public_id == public_id), None)


def available(public: PublicModel) -> bool:
    return any(r.model.available for r in public.replicas)


def loaded(public: PublicModel) -> bool:
    return any(r.model.loaded and r.model.available for r in public.replicas)


def openai_entry(public: PublicModel, owner: str) -> dict[str, Any]:
    return {
        "id": public.public_id,
        "object": "model",
        "created": public.head.created,
        "owned_by": owner,
        "status": "ready" if loaded(public) else "unloaded",
    }


def _dump(memory: RuntimeMemory | None) -> dict[str, Any] | None:
    return None if memory is None else dict(memory.model_dump(mode="json"))


def replicas(public: PublicModel) -> list[dict[str, Any]]:
    return [
        {
            "node_id": r.node_id,
            "local_id": r.local_id,
            "available": r.model.available,
            "loaded": r.model.loaded,
            # What its node's snapshot said of memory (issue 25; None from an older node).
            "memory": _dump(r.model.memory),
            "estimate": r.model.estimate,
            "evicts": r.model.evicts,
        }
        for r in public.replicas
    ]


def router_entry(public: PublicModel) -> dict[str, Any]:
    head = public.head
    return {
        "id": public.public_id,
        "image_id": public.public_image_id,
        "capabilities": list(head.capabilities),
        "backend_mode": head.backend_mode,
        "source": "slave",
        "node_id": public.replicas[0].node_id,
        "config_file": head.filename,
        "hashes": {"config": head.config_hash, "model": head.model_hash},
        "status": "ready" if loaded(public) else "unloaded",
        "available": available(public),
        "missing_files": [],
        "disabled": False,
        "memory": _dump(public.head.memory),
        "replicas": replicas(public),
        "benchmark": None,
    }


def ollama_tag(public: PublicModel) -> dict[str, Any]:
    return {
        "name": public.public_id,
        "model": public.public_id,
        "modified_at": "1970-01-01T00:00:00Z",
        "size": 0,
        "digest": public.head.model_hash or "",
        "details": {
            "parent_model": "",
            "format": "",
            "family": "",
            "families": None,
            "parameter_size": "",
            "quantization_level": "",
        },
    }
