"""The Ollama surface answered by the router: tags, ps, version, show.

Generation routes (`/api/chat`, `/api/generate`, `/api/embed`) are in
router/api/inference/ollama_gen.py: forwarded as they are to KoboldCpp, translated for
llama-server and vLLM (router/ollama/).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from aiohttp import web

from router import __version__
from router.api.node import TEXT_SIDE, ollama_tag, remote_only
from router.api.node import loaded as remote_loaded
from router.appkeys import CATALOG, RUNTIMES
from router.config import ModelConfig
from router.domain import Lane
from router.edge import Handler, read_json

OLLAMA_COMPAT_VERSION = "0.12.0"


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def _details(config: ModelConfig) -> dict[str, Any]:
    model = config.model_file(Lane.TEXT) or config.model_file(Lane.EMBEDDINGS)
    fmt = "gguf" if model is not None and model.suffix.lower() == ".gguf" else ""
    return {
        "parent_model": "",
        "format": fmt,
        "family": "",
        "families": None,
        "parameter_size": "",
        "quantization_level": "",
    }


def _tag(config: ModelConfig) -> dict[str, Any]:
    model = config.model_file(Lane.TEXT) or config.model_file(Lane.EMBEDDINGS)
    try:
        size = model.stat().st_size if model else 0
        modified = _iso(config.path.stat().st_mtime)
    except OSError:
        size, modified = 0, _iso(0)
    digest = config.asset_sha256.get("model_param") or config.config_sha256
    return {
        "name": config.id,
        "model": config.id,
        "modified_at": modified,
        "size": size,
        "digest": digest,
        "details": _details(config),
    }


def _text_configs(request: web.Request) -> list[ModelConfig]:
    seen: set[str] = set()
    out = []
    for config in request.app[CATALOG].configs():
        if config.lanes & {Lane.TEXT, Lane.EMBEDDINGS} and config.id not in seen:
            seen.add(config.id)
            out.append(config)
    return out


async def tags(request: web.Request) -> web.StreamResponse:
    remote = remote_only(request, TEXT_SIDE)
    tags = [_tag(c) for c in _text_configs(request)]
    return web.json_response({"models": tags + [ollama_tag(p) for p in remote]})


async def ps(request: web.Request) -> web.StreamResponse:
    loaded = {
        v.config.id
        for v in request.app[RUNTIMES].views()
        if v.ready and v.occupies & {Lane.TEXT, Lane.EMBEDDINGS}
    }
    models = []
    for config in _text_configs(request):
        if config.id in loaded:
            entry = _tag(config)
            entry.pop("modified_at")
            entry.update({"expires_at": "0001-01-01T00:00:00Z", "size_vram": 0})
            models.append(entry)
    for public in remote_only(request, TEXT_SIDE):
        if remote_loaded(public):  # on a node that answers its polls
            entry = ollama_tag(public)
            entry.pop("modified_at")
            entry.update({"expires_at": "0001-01-01T00:00:00Z", "size_vram": 0})
            models.append(entry)
    return web.json_response({"models": models})


async def version(request: web.Request) -> web.StreamResponse:
    return web.json_response({"version": OLLAMA_COMPAT_VERSION, "router": __version__})


async def show(request: web.Request) -> web.StreamResponse:
    body = await read_json(request, required=True)
    config = request.app[CATALOG].require(body.get("model") or body.get("name"))
    capabilities = []
    if Lane.TEXT in config.lanes:
        capabilities.append("completion")
    if Lane.EMBEDDINGS in config.lanes:
        capabilities.append("embedding")
    if "mmproj" in config.components:
        capabilities.append("vision")
    return web.json_response(
        {
            "modelfile": "",
            "parameters": "",
            "template": "",
            "details": _details(config),
            "model_info": {"general.basename": config.id},
            "capabilities": capabilities,
            "modified_at": _tag(config)["modified_at"],
        }
    )


HANDLERS: dict[str, Handler] = {
    "ollama.tags": tags,
    "ollama.ps": ps,
    "ollama.version": version,
    "ollama.show": show,
}
