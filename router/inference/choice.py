"""The model a forwarded request goes to (`choose`: named, or the lane's fallback when it names
none) and whether that model serves the route (`check_served`); each refusal names the ID the
client used and what to use instead."""

from __future__ import annotations

from aiohttp import web

from backends.registry import adapter_for
from router.appkeys import CATALOG, RUNTIMES
from router.classify import Route
from router.config import ModelConfig
from router.domain import BackendMode, Lane, family_for
from router.errors import BadRequest, ModelNotFound, RouteNotFound
from router.forwarding import Selection
from router.inference import selectorless
from router.runtime import choose_config


def choose(
    request: web.Request, route: Route, selection: Selection, chosen: Lane | None = None
) -> tuple[ModelConfig, str, Lane]:
    catalog = request.app[CATALOG]
    lane = route.lane or Lane.TEXT
    if selection.model is None:
        if route.model_required:
            raise BadRequest(
                f'{route.template} needs a "model": one of {", ".join(catalog.text_ids()) or "(none configured)"}',
                param="model",
            )
        config, lane = fallback(request, lane)
        return (
            config,
            (config.image_id if lane is Lane.IMAGE and config.image_id else config.id),
            lane,
        )
    found = catalog.resolve(selection.model)
    if found is None:
        raise ModelNotFound(selection.model)
    config = found
    if selection.model == config.image_id and lane is not Lane.IMAGE:
        raise BadRequest(
            f"{selection.model!r} is an image model; use /v1/images/generations or /sdapi/v1/txt2img"
        )
    return config, selection.model, chosen or lane


def fallback(request: web.Request, lane: Lane) -> tuple[ModelConfig, Lane]:
    """No selector: the lane's active runtime, else the only config that serves it. An unnamed
    embeddings request never loads a model (too costly a guess): it goes to the default
    embedding backend or is refused (router/inference/selectorless.py)."""
    if lane is Lane.EMBEDDINGS:
        return selectorless.local_embeddings(request, request.path, request.method)
    configs = request.app[CATALOG].configs()
    views = request.app[RUNTIMES].views()
    return choose_config(None, lane, configs, views), lane


def check_served(
    route: Route,
    config: ModelConfig,
    public_id: str,
    lane: Lane,
    request: web.Request,
    backend_path: str,
) -> None:
    # Messages name the ID the client used (an image model's own ID, an alias), never a file.
    if lane not in config.lanes:
        raise BadRequest(f"model {public_id!r} has no {lane} component; {_use_instead(config)}")
    if config.backend_mode is BackendMode.VLLM and not route.vllm:
        raise RouteNotFound(request.path)  # vLLM's strict allowlist (S23): never forwarded
    family = family_for(config.backend_mode, lane)
    if family is None:
        raise BadRequest(f"{lane} requests are not served under backend_mode {config.backend_mode}")
    if not adapter_for(family).serves(backend_path, request.method):
        raise BadRequest(
            f"{request.method} {request.path} is not served by {family} for model {public_id!r}; "
            f"{_use_instead(config)}"
        )


_ENDPOINT_FOR = {
    Lane.TEXT: "/v1/chat/completions",
    Lane.EMBEDDINGS: "/v1/embeddings",
    Lane.IMAGE: "/v1/images/generations",
    Lane.VOICE: "/v1/audio/transcriptions",
    Lane.MUSIC: "/api/extra/music/...",
}


def _use_instead(config: ModelConfig) -> str:
    uses = [_ENDPOINT_FOR[lane] for lane in Lane if lane in config.lanes]
    return "use " + " or ".join(uses) if uses else "it serves nothing"
