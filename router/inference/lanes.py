"""Which configuration a media request goes to: the one it names, else the lane's active
runtime, else the only configuration serving the lane (`router.runtime.choose_config`, the
rule every surface shares). Used by the image, voice, music and ComfyUI handlers.
"""

from __future__ import annotations

from aiohttp import web

from router.appkeys import CATALOG, RUNTIMES
from router.config import ModelConfig
from router.domain import Lane
from router.errors import BadRequest, ModelNotFound
from router.runtime import RuntimeView, public_id
from router.runtime import active_view as _active_view
from router.runtime import choose_config as _choose_config


def active_view(app: web.Application, lane: Lane) -> RuntimeView | None:
    """A snapshot of the runtime loading or serving `lane` now (never starts one)."""
    return _active_view(lane, app[RUNTIMES].views())


def resolve_for_lane(app: web.Application, model: str, lane: Lane) -> ModelConfig:
    config = app[CATALOG].resolve(model)
    if config is None:
        raise ModelNotFound(model)
    if lane not in config.lanes:
        raise BadRequest(f"model {model!r} has no {lane} component", param="model")
    return config


def choose_config(app: web.Application, model: str | None, lane: Lane) -> ModelConfig:
    """The named model, else the lane's active runtime, else the only config serving it."""
    named = resolve_for_lane(app, model, lane) if model is not None else None
    return _choose_config(named, lane, app[CATALOG].configs(), app[RUNTIMES].views())


__all__ = ["active_view", "choose_config", "public_id", "resolve_for_lane"]
