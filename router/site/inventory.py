"""The inventory's records, built from plain inputs (configs, runtime views, file stats and
digests) so the shape is decided in one place and tested without a router.

Shape (docs/site.md, "Inventory and node state"): `models` holds one record per configuration;
`files` one per model file under `models.file_roots` (only when asked for); `nodes` one
summary per node, this node only until the cluster exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from router.config import ModelConfig
from router.domain import Lane
from router.runtime import RuntimeView
from router.site.files import FileStat, kind_of
from router.site.hashing import Digest
from router.site.portable import split_key

LANE_ORDER = tuple(lane.value for lane in Lane)


def runtime_record(view: RuntimeView) -> dict[str, Any]:
    return {
        "runtime": view.key,
        "model": view.config.id,
        "lane": view.lane.value,
        "lanes": sorted(lane.value for lane in view.occupies),
        "family": view.family.value,
        "state": view.state.value,
        "draining": view.draining,
        "since": view.since,
        "in_flight": view.leases,
        "queued": view.queued,
        "pid": view.pid,
        "port": view.port,
    }


def _main_key(config: ModelConfig) -> str | None:
    for lane in sorted(config.lanes, key=lambda lane: LANE_ORDER.index(lane.value)):
        path = config.model_file(lane)
        if path is not None:
            return next(k for k, p in config.components.items() if p == path)
    return None


def model_record(
    config: ModelConfig,
    *,
    node_id: str,
    enabled: bool,
    stats: Mapping[str, FileStat],
    digests: Mapping[str, Digest],
    views: Sequence[RuntimeView],
) -> dict[str, Any]:
    components = []
    for key, path in config.components.items():
        field, position = split_key(key)
        stat = stats.get(str(path))
        digest = digests.get(stat.real) if stat is not None else None
        components.append(
            {
                "field": field,
                "position": position,
                "filename": path.name,
                "path": str(path),
                "present": stat is not None,
                "size": stat.size if stat is not None else None,
                "sha256": digest.sha256 if digest is not None else None,
            }
        )
    main = _main_key(config)
    main_hash = next((c["sha256"] for c in components if _key(c) == main), None)
    runtimes = [runtime_record(v) for v in views if v.config.id == config.id]
    return {
        "id": config.id,
        "local_id": config.id,
        "image_id": config.image_id,
        "node_id": node_id,
        "filename": config.path.name,
        "backend_mode": config.backend_mode.value,
        "capabilities": sorted((lane.value for lane in config.lanes), key=LANE_ORDER.index),
        "enabled": enabled,
        "config_hash": config.config_sha256,
        "model_hash": main_hash,
        "components": components,
        "state": runtimes[0]["state"] if runtimes else "unloaded",
        "runtimes": runtimes,
        "benchmark": None,  # filled by the route from the store's newest run
        "warnings": list(config.warnings),
    }


def _key(component: Mapping[str, Any]) -> str:
    pos = component["position"]
    return component["field"] if pos is None else f"{component['field']}[{pos}]"


def file_records(
    stats: Iterable[FileStat],
    digests: Mapping[str, Digest],
    configs: Iterable[ModelConfig],
    component_stats: Mapping[str, FileStat],
) -> list[dict[str, Any]]:
    """One record per scanned file, with the configurations that use it (matched by resolved
    path, so a config naming a file through a link still counts)."""
    users: dict[str, list[dict[str, str]]] = {}
    for config in configs:
        for key, path in config.components.items():
            stat = component_stats.get(str(path))
            if stat is not None:
                users.setdefault(stat.real, []).append({"id": config.id, "field": key})
    out = []
    for stat in stats:
        digest = digests.get(stat.real)
        out.append(
            {
                "name": stat.path.rsplit("/", 1)[-1],
                "path": stat.path,
                "size": stat.size,
                "mtime": stat.mtime_ns / 1e9,
                "kind": kind_of(stat.path),
                "sha256": digest.sha256 if digest is not None else None,
                "metadata": dict(digest.metadata) if digest and digest.metadata else None,
                "used_by": users.get(stat.real, []),
            }
        )
    return out
