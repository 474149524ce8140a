"""The WebUI catalog and the runtime a kind is proxied to, decided on configs and runtime
views (pure: no I/O; the handlers read the state and pass it in).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from router.config import ModelConfig
from router.domain import Lane, family_for
from router.runtime import RuntimeState, RuntimeView, public_id
from router.webuis.kinds import KINDS, Kind
from router.webuis.paths import prefix_of


@dataclass(frozen=True)
class Node:
    node_id: str
    node_url: str | None


def lane_for(kind: Kind, config: ModelConfig) -> Lane | None:
    """The lane through which `config` serves `kind` (its first compatible one), or None."""
    if config.backend_mode is not kind.mode:
        return None
    return next(
        (
            lane
            for lane in kind.lanes
            if lane in config.lanes and family_for(config.backend_mode, lane) is kind.family
        ),
        None,
    )


def compatible(kind: Kind, configs: Iterable[ModelConfig]) -> list[ModelConfig]:
    return [c for c in configs if lane_for(kind, c) is not None]


def _runtimes(kind: Kind, views: Iterable[RuntimeView]) -> list[RuntimeView]:
    """Runtimes of the kind's family that serve a compatible lane, not on their way out."""
    return [
        v
        for v in views
        if v.family is kind.family
        and not v.draining
        and v.state in (RuntimeState.LOADING, RuntimeState.READY)
        and runtime_lane(kind, v) is not None
    ]


def runtime_lane(kind: Kind, view: RuntimeView) -> Lane | None:
    """The lane through which a runtime serves `kind` (a KoboldCpp one holds several)."""
    if lane_for(kind, view.config) is None:
        return None
    return next((ln for ln in kind.lanes if ln in view.occupies and ln in view.config.lanes), None)


def serving(kind: Kind, views: Iterable[RuntimeView]) -> RuntimeView | None:
    """The ready runtime the kind is proxied to: the first of the kind's lanes that has one."""
    ready = [v for v in _runtimes(kind, views) if v.ready]
    for lane in kind.lanes:
        found = next((v for v in ready if lane in v.occupies), None)
        if found is not None:
            return found
    return None


def loading(kind: Kind, views: Iterable[RuntimeView]) -> RuntimeView | None:
    return next((v for v in _runtimes(kind, views) if not v.ready), None)


def listed(configs: Sequence[ModelConfig]) -> list[Kind]:
    """The kinds this node offers: those with at least one compatible configuration."""
    return [k for k in KINDS if compatible(k, configs)]


def entry(
    kind: Kind,
    configs: Sequence[ModelConfig],
    views: Sequence[RuntimeView],
    *,
    enabled: bool,
    node: Node,
) -> dict[str, Any]:
    """One catalog record (the shape of `GET /router/v1/site/webuis`)."""
    active = serving(kind, views)
    config = active.config if active else None
    return {
        "id": kind.id,
        "name": kind.name,
        "backend": kind.family.value,
        "backend_mode": kind.mode.value,
        "lane": kind.lanes[0].value,
        "url": prefix_of(kind),
        "node_id": node.node_id,
        "node_url": node.node_url,
        "enabled": enabled,
        "active": active is not None,
        "active_model_id": config.id if config else None,
        "active_image_id": config.image_id if config and Lane.IMAGE in kind.lanes else None,
        "requires_loaded_model": True,
        "can_open_without_model": False,
        "compatible_models": [
            _model(kind, c, node, c.id == (config.id if config else None))
            for c in compatible(kind, configs)
        ],
    }


def _model(kind: Kind, config: ModelConfig, node: Node, active: bool) -> dict[str, Any]:
    lane = lane_for(kind, config)
    assert lane is not None
    image_id = config.image_id if lane is Lane.IMAGE else None
    model_file = config.model_file(lane)
    return {
        "id": public_id(config, lane),
        "model_id": config.id,
        "local_id": config.id,
        "image_id": image_id,
        "local_image_id": image_id,
        "filename": model_file.name if model_file else None,
        "node_id": node.node_id,
        "node_url": node.node_url,
        "backend_mode": config.backend_mode.value,
        "active": active,
    }


def catalog(
    configs: Sequence[ModelConfig],
    views: Sequence[RuntimeView],
    enabled: Collection[str],
    node: Node,
) -> list[dict[str, Any]]:
    return [entry(k, configs, views, enabled=k.id in enabled, node=node) for k in listed(configs)]


def what_to_load(kind: Kind, configs: Sequence[ModelConfig]) -> str:
    """The sentence a 503 ends with: the models that would make the kind usable."""
    names = ", ".join(c.id for c in compatible(kind, configs)) or "(none configured)"
    return f"load one of: {names} (POST /router/v1/site/webuis/load)"


__all__ = [
    "Node",
    "catalog",
    "compatible",
    "entry",
    "lane_for",
    "listed",
    "loading",
    "runtime_lane",
    "serving",
    "what_to_load",
]
