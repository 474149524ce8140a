"""Model discovery answered from the catalog alone (the disable/enable switch, a site route,
is router/api/site/models_state.py)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from router.appkeys import CATALOG, RUNTIMES, SETTINGS, STORE
from router.benchmarks import Summary
from router.cluster import resident_of
from router.config import ModelConfig
from router.config.availability import MISSING_STATUS
from router.domain import Lane
from router.edge import Handler, match_of, may_use
from router.errors import ModelNotFound
from router.inference import find_remote, openai_entry, remote_only, router_entry

OWNER = "tensor-router"


def _created(config: ModelConfig) -> int:
    try:
        return int(config.path.stat().st_mtime)
    except OSError:
        return 0


def _openai_entry(
    request: web.Request, config: ModelConfig, name: str | None = None
) -> dict[str, Any]:
    return {
        "id": name or config.id,
        "object": "model",
        "created": _created(config),
        "owned_by": OWNER,
        "status": _status(request, config),
    }


def _status(request: web.Request, config: ModelConfig) -> str:
    """The runtime's state; `missing files` for an unloaded config whose files are absent."""
    status = request.app[RUNTIMES].status_of(config.id)
    if status == "unloaded" and request.app[CATALOG].missing_files(config):
        return MISSING_STATUS
    return status


async def openai_list(request: web.Request) -> web.StreamResponse:
    catalog = request.app[CATALOG]
    data = [
        _openai_entry(request, c, name)
        for c in catalog.configs()
        if c.lanes & _TEXT_SIDE
        for name in (c.id, *c.aliases)  # router_aliases are listed as models of their own
        if may_use(request, name)  # a scoped key sees only the models it may use
    ]
    remote = remote_only(request, _TEXT_SIDE)
    data += [openai_entry(p, OWNER) for p in remote if may_use(request, p.public_id)]
    return web.json_response({"object": "list", "data": data})


async def openai_get(request: web.Request) -> web.StreamResponse:
    model_id = match_of(request).params.get("model_id") or match_of(request).params.get("id", "")
    if not may_use(request, model_id):  # not the key's to see: as if it did not exist
        raise ModelNotFound(model_id)
    config = request.app[CATALOG].resolve(model_id)
    if config is None or model_id not in (config.id, *config.aliases):
        remote = find_remote(request, model_id)
        if remote is None:
            raise ModelNotFound(model_id)
        return web.json_response(openai_entry(remote, OWNER))
    return web.json_response(_openai_entry(request, config, model_id))


async def sd_list(request: web.Request) -> web.StreamResponse:
    catalog = request.app[CATALOG]
    active = request.app[RUNTIMES].active_config_ids()
    models = []
    for image_id in catalog.image_ids(active):
        config = catalog.resolve(image_id)
        if config is None:
            continue
        diffusion = config.model_file(Lane.IMAGE)
        # An image-only config's aliases are image names; a combined one's are text names.
        names = (image_id, *config.aliases) if config.lanes == {Lane.IMAGE} else (image_id,)
        models += [
            {
                "title": name,
                "model_name": name,
                "hash": (config.asset_sha256.get("sdmodel") or "")[:10] or None,
                "sha256": config.asset_sha256.get("sdmodel"),
                "filename": diffusion.name if diffusion else "",
                "config": None,
            }
            for name in names
        ]
    return web.json_response(models)


def router_record(request: web.Request, config: ModelConfig) -> dict[str, Any]:
    catalog = request.app[CATALOG]
    settings = request.app[SETTINGS]
    missing = catalog.missing_files(config)
    return {
        "id": config.id,
        "image_id": config.image_id,
        "aliases": list(config.aliases),
        "capabilities": sorted(lane.value for lane in config.lanes),
        "backend_mode": config.backend_mode.value,
        "source": "local",
        "node_id": settings.cluster.node_id,
        "config_file": config.path.name,
        "hashes": {"config": config.config_sha256, **dict(config.asset_sha256)},
        "status": _status(request, config),
        "available": not missing,
        "missing_files": list(missing),
        "disabled": catalog.is_disabled(config.id),
    }


async def router_list(request: web.Request) -> web.StreamResponse:
    catalog = request.app[CATALOG]
    # One read for every model: the newest benchmark run of each, or null.
    benchmarks = await request.app[STORE].benchmarks.latest()
    # Each resident configuration's memory, as GET /router/v1/status shows it (issue 25).
    per_runtime, _ = await request.app[RUNTIMES].memory_status()
    resident = resident_of(per_runtime)
    data = [
        {
            **router_record(request, c),
            "memory": _dump(resident.get(c.id)),
            "benchmark": _benchmark(benchmarks.get(c.id)),
        }
        for c in catalog.all_configs()
    ]
    data += [router_entry(p) for p in remote_only(request)]
    return web.json_response({"object": "list", "data": data, "errors": catalog.errors})


def _dump(memory: Any) -> dict[str, Any] | None:
    return None if memory is None else dict(memory.model_dump(mode="json"))


def _benchmark(row: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if row is None else Summary.from_row(row).to_dict()


_TEXT_SIDE = frozenset({Lane.TEXT, Lane.EMBEDDINGS})

HANDLERS: dict[str, Handler] = {
    "models.openai_list": openai_list,
    "models.openai_get": openai_get,
    "models.sd_list": sd_list,
    "models.router_list": router_list,
}

__all__ = ["HANDLERS", "router_record"]
