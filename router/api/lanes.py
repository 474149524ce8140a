"""Which configuration a media request goes to: the one it names, else the lane's active
runtime, else the only configuration serving the lane (the rule docs/decisions.md states for
every route without a selector). Shared by the image, voice, music and ComfyUI handlers.
"""

from __future__ import annotations

from aiohttp import web

from router.appkeys import CATALOG, RUNTIMES
from router.config import ModelConfig
from router.domain import Lane
from router.errors import BadRequest, ModelNotFound
from router.runtime import Runtime, RuntimeState

_LIVE = (RuntimeState.LOADING, RuntimeState.READY)


def active_runtime(app: web.Application, lane: Lane) -> Runtime | None:
    """The runtime loading or serving `lane` now (never starts one)."""
    for runtime in app[RUNTIMES].runtimes():
        if lane in runtime.spec.occupies and runtime.state in _LIVE and not runtime.draining:
            return runtime
    return None


def public_id(config: ModelConfig, lane: Lane) -> str:
    """The ID clients use for `config` on `lane` (image lanes have their own IDs)."""
    return config.image_id if lane is Lane.IMAGE and config.image_id else config.id


def resolve_for_lane(app: web.Application, model: str, lane: Lane) -> ModelConfig:
    config = app[CATALOG].resolve(model)
    if config is None:
        raise ModelNotFound(model)
    if lane not in config.lanes:
        raise BadRequest(f"model {model!r} has no {lane} component", param="model")
    return config


def choose_config(app: web.Application, model: str | None, lane: Lane) -> ModelConfig:
    """The named model, else the lane's active runtime, else the only config serving it."""
    if model is not None:
        return resolve_for_lane(app, model, lane)
    runtime = active_runtime(app, lane)
    if runtime is not None:
        return runtime.config  # type: ignore[no-any-return]
    candidates = [c for c in app[CATALOG].configs() if lane in c.lanes]
    if len(candidates) == 1:
        return candidates[0]
    names = ", ".join(public_id(c, lane) for c in candidates) or "(none configured)"
    raise BadRequest(
        f'name a model with a "model" field, ?model= or the X-Tensors-Model header; '
        f"{lane} models: {names}",
        param="model",
    )
