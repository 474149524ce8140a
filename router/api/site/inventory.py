"""Site routes for this node's inventory, runtimes and model files (docs/site.md).

Every route takes `node_id` (query or body; default this node). Any other node is a 404: the
cluster layer will route those; until then this node answers only for itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from router.api.site.setup import backends_state
from router.appkeys import (
    CATALOG,
    CLUSTER,
    KV_CACHES,
    KV_HISTORY,
    RUNTIMES,
    SETTINGS,
    SITE_FILES,
    STORE,
)
from router.benchmarks import Summary
from router.config import ModelConfig
from router.domain import Lane
from router.edge import Handler, addressed_node, read_json
from router.errors import BadRequest, Conflict, ModelNotFound, NotFound
from router.site import SiteFiles, file_records, model_record, runtime_record
from router.site.hardware import hardware

_LANES = {lane.value: frozenset({lane}) for lane in Lane} | {"all": frozenset(Lane)}
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no", ""})


async def site_context(app: web.Application) -> AsyncIterator[None]:
    """The node's file index; its hash cache lives in the store opened before it."""
    app[SITE_FILES] = SiteFiles(app[SETTINGS].models.file_roots, app[STORE].file_hashes)
    yield


def _flag(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise BadRequest(f"{name} must be true or false", param=name)


def _node_summary(
    request: web.Request, models: list[str], files: int | None, devices: list[dict[str, Any]]
) -> dict[str, Any]:
    settings = request.app[SETTINGS]
    return {
        "devices": devices,  # the memory ledger's rows, as GET /router/v1/status has them
        "node_id": settings.cluster.node_id,
        "node_url": settings.cluster.public_url,
        "source": "local",
        "role": settings.cluster.role,
        "backend_mode": settings.backend.mode.value,
        "available": True,
        "hardware": hardware(),
        "models": models,
        "files": files,
        "error": None,
        "last_contact": None,
    }


def _registered_nodes(request: web.Request) -> list[dict[str, Any]]:
    """The master's registry: every slave, whether it answers, and when it last did."""
    if request.app[SETTINGS].cluster.role != "master":
        return []
    return [
        {
            "node_id": entry.node_id or None,
            "node_url": entry.node_url,
            "devices": [d.model_dump(mode="json") for d in entry.devices],  # its last snapshot's
            "source": "slave",
            "role": "slave",
            "backend_mode": None,
            "available": entry.healthy,
            "hardware": None,
            "models": [m.local_id for m in entry.models],
            "files": None,
            "error": entry.error,
            "last_contact": entry.last_contact,
        }
        for entry in request.app[CLUSTER].registry.nodes()
    ]


async def _cache_facts(
    request: web.Request, configs: list[ModelConfig], models: list[dict[str, Any]]
) -> None:
    """Each model record's `kv_persist` (mode, probe verdict, its saved conversations, and the
    last save and restore of this run with a warning when the restore failed) and `prompt_cache` (the share of prompt
    tokens its recent requests took from the backend's cache; issue 33)."""
    kv = request.app[KV_CACHES]  # stats files and finds the binary: off the event loop
    saved = {c.id: kv.saved_conversations(c.id) for c in configs}  # memory: on the loop
    kv_status = await asyncio.to_thread(lambda: {c.id: kv.status(c, saved[c.id]) for c in configs})
    history = request.app[KV_HISTORY]
    shares = await request.app[STORE].cache_shares.recent([c.id for c in configs], time.time())
    for record in models:
        status = kv_status.get(record["id"])
        record["kv_persist"] = None if status is None else {**status, **history.last(record["id"])}
        record["prompt_cache"] = shares.get(record["id"])


async def inventory(request: web.Request) -> web.Response:
    node_id = addressed_node(request)
    include_files = _flag(request, "include_files")
    catalog, site = request.app[CATALOG], request.app[SITE_FILES]
    configs = catalog.all_configs()
    enabled = {c.id for c in catalog.configs()}
    component_stats = await site.stats({str(p) for c in configs for p in c.components.values()})
    scanned = await site.scan(component_stats) if include_files else []
    digests = await site.digests([*component_stats.values(), *scanned])
    views = request.app[RUNTIMES].views()  # read after the hashing: the state as it is now
    models = [
        model_record(
            c,
            node_id=node_id,
            enabled=c.id in enabled,
            stats=component_stats,
            digests=digests,
            views=views,
        )
        for c in configs
    ]
    benchmarks = await request.app[STORE].benchmarks.latest()
    for record in models:  # the newest benchmark run of each model, as /router/v1/models has
        row = benchmarks.get(record["id"])
        record["benchmark"] = None if row is None else Summary.from_row(row).to_dict()
    await _cache_facts(request, configs, models)
    files = file_records(scanned, digests, configs, component_stats) if include_files else None
    settings = request.app[SETTINGS]
    _, devices = await request.app[RUNTIMES].memory_status()
    ids = [m["id"] for m in models]
    summary = _node_summary(request, ids, len(scanned) if files else None, devices)
    return web.json_response(
        {
            "object": "site.inventory",
            "role": settings.cluster.role,
            "node_id": node_id,
            "node_url": settings.cluster.public_url,
            "nodes": [summary, *_registered_nodes(request)],
            "models": models,
            "files": files,
            "errors": catalog.errors,
        }
    )


async def nodes_state(request: web.Request) -> web.Response:
    node_id = addressed_node(request)
    manager = request.app[RUNTIMES]
    runtimes = [runtime_record(v) for v in manager.views()]
    return web.json_response(
        {
            "node_id": node_id,
            "role": request.app[SETTINGS].cluster.role,
            "runtimes": runtimes,
            "backends": backends_state(request),
            "active_requests": sum(r["in_flight"] for r in runtimes),
            "queued_requests": sum(manager.queue_length(lane) for lane in Lane),
        }
    )


def _config_named(request: web.Request, model: Any) -> ModelConfig:
    if not isinstance(model, str) or not model:
        raise BadRequest("model must be a non-empty string", param="model")
    # Disabled configs count: a model switched off while running must still be unloadable.
    for config in request.app[CATALOG].all_configs():
        if model in (config.id, config.image_id):
            return config
    raise ModelNotFound(model)


async def nodes_unload(request: web.Request) -> web.Response:
    body = await read_json(request, required=True)
    node_id = addressed_node(request)
    lane, model = body.get("lane"), body.get("model")
    if lane is None and model is None:
        raise BadRequest("give lane (a lane name or all) or model", param="lane")
    if lane is not None and (not isinstance(lane, str) or lane not in _LANES):
        raise BadRequest(f"lane must be one of {', '.join(_LANES)}", param="lane")
    config_id = _config_named(request, model).id if model is not None else None
    lanes = _LANES[lane] if lane is not None else frozenset(Lane)
    stopped = await request.app[RUNTIMES].unload(lanes, model=config_id)
    return web.json_response(
        {"node_id": node_id, "lane": lane, "model": model, "unloaded": stopped}
    )


async def model_file_hash(request: web.Request) -> web.Response:
    body = await read_json(request, required=True)
    node_id = addressed_node(request)
    path = body.get("path")
    if not isinstance(path, str) or not path:
        raise BadRequest("path must be a non-empty string", param="path")
    if "\x00" in path:
        raise BadRequest("path must not contain a NUL byte", param="path")
    site = request.app[SITE_FILES]
    stat = await site.known_file(path)
    if stat is None:
        raise NotFound("no such file in this node's inventory (models.file_roots)", param="path")
    digest = (await site.digests([stat])).get(stat.real)
    if digest is None:
        raise Conflict("the file changed while it was read; ask again", param="path")
    return web.json_response(
        {"node_id": node_id, "path": stat.path, "size": stat.size, "sha256": digest.sha256}
    )


HANDLERS: dict[str, Handler] = {
    "site.inventory": inventory,
    "site.nodes_state": nodes_state,
    "site.nodes_unload": nodes_unload,
    "site.model_file_hash": model_file_hash,
}
