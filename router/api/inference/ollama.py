"""The Ollama surface answered by the router: tags, ps, version, show.

Model metadata comes from each model file's GGUF header (router/ollama/metadata.py), read in
a worker thread once per file and cached (router/site/gguf_headers.py).

Generation routes (`/api/chat`, `/api/generate`, `/api/embed`) are in
router/api/inference/ollama_gen.py: forwarded as they are to KoboldCpp, translated for
llama-server and vLLM (router/ollama/); `/`, pull and the other management routes in
router/api/inference/ollama_manage.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from router import __version__
from router.api.inference import ollama_manage
from router.appkeys import CATALOG, GGUF_HEADERS, RUNTIMES
from router.cluster.local import context_length
from router.config import ModelConfig
from router.domain import Lane
from router.edge import Handler, may_use, read_json
from router.inference import TEXT_SIDE, ollama_tag, remote_only
from router.inference import loaded as remote_loaded
from router.ollama import canonical_name
from router.ollama import metadata as meta
from router.site.gguf_headers import GgufHeaders, Header

OLLAMA_COMPAT_VERSION = "0.12.0"
HEADER_WAIT_S = 2.0  # a GGUF header not read by then is answered blank this once


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def _main_file(config: ModelConfig) -> tuple[Path | None, str | None]:
    """The file whose header describes the model, and its asset hash when the catalog has one."""
    for key in ("model_param", "embeddingsmodel"):
        path = config.components.get(key)
        if path is not None:
            return path, config.asset_sha256.get(key)
    return None, None


async def _header(request: web.Request, config: ModelConfig) -> Header | None:
    path, sha256 = _main_file(config)
    if path is None or path.suffix.lower() != ".gguf":
        return None
    return await request.app[GGUF_HEADERS].get(path, sha256, HEADER_WAIT_S)


def _details(config: ModelConfig, header: Header | None) -> dict[str, Any]:
    path, _ = _main_file(config)
    fmt = "gguf" if path is not None and path.suffix.lower() == ".gguf" else ""
    return meta.details(header, fmt)


def _tag(config: ModelConfig, header: Header | None) -> dict[str, Any]:
    model, _ = _main_file(config)
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
        "details": _details(config, header),
    }


def _text_configs(request: web.Request) -> list[ModelConfig]:
    seen: set[str] = set()
    out = []
    for config in request.app[CATALOG].configs():
        if config.lanes & {Lane.TEXT, Lane.EMBEDDINGS} and config.id not in seen:
            seen.add(config.id)
            out.append(config)
    return out


async def _headers(request: web.Request, configs: list[ModelConfig]) -> list[Header | None]:
    return list(await asyncio.gather(*(_header(request, c) for c in configs)))


async def tags(request: web.Request) -> web.StreamResponse:
    # A scoped key sees only the models it may use.
    remote = [p for p in remote_only(request, TEXT_SIDE) if may_use(request, p.public_id)]
    configs = [c for c in _text_configs(request) if may_use(request, c.id)]
    headers = await _headers(request, configs)
    tags = [_tag(c, h) for c, h in zip(configs, headers, strict=True)]
    return web.json_response({"models": tags + [ollama_tag(p) for p in remote]})


async def ps(request: web.Request) -> web.StreamResponse:
    loaded = {
        v.config.id: v
        for v in request.app[RUNTIMES].views()
        if v.ready and v.occupies & {Lane.TEXT, Lane.EMBEDDINGS}
    }
    configs = [c for c in _text_configs(request) if c.id in loaded]
    # `size` and `size_vram` are what the memory ledger says the runtime holds (all devices,
    # and the GPUs' part), so `ollama ps` shows the real CPU/GPU split (docs/residency.md).
    # The snapshot GET /router/v1/status answers from: never waits for an estimate's read.
    memory, _ = request.app[RUNTIMES].memory_now()
    now = time.time()
    models = []
    for config, header in zip(configs, await _headers(request, configs), strict=True):
        view = loaded[config.id]
        entry = _tag(config, header)
        entry.pop("modified_at")
        entry["expires_at"] = meta.expires_at(view.keep_alive, view.idle_deadline, now)
        held = memory.get(view.key)
        if held is not None:
            entry["size"] = held["bytes"]
        entry["size_vram"] = _gpu_bytes(held)
        entry["context_length"] = meta.context_length(context_length(config), header)
        models.append(entry)
    for public in remote_only(request, TEXT_SIDE):
        if remote_loaded(public):  # on a node that answers its polls
            entry = ollama_tag(public)
            entry.pop("modified_at")
            entry.update({"expires_at": "0001-01-01T00:00:00Z", "size_vram": 0})
            models.append(entry)
    return web.json_response({"models": models})


def _gpu_bytes(held: dict[str, Any] | None) -> int:
    if held is None:
        return 0
    return sum(b for d, b in held["by_device"].items() if d != "host")


async def version(request: web.Request) -> web.StreamResponse:
    return web.json_response({"version": OLLAMA_COMPAT_VERSION, "router": __version__})


async def show(request: web.Request) -> web.StreamResponse:
    # Any content type, as Ollama and every other /api/* route here (its own curl example
    # sends JSON as a form).
    body = await read_json(request, required=True, types=None)
    name = body.get("model") or body.get("name")
    config = request.app[CATALOG].require(canonical_name(name) if isinstance(name, str) else name)
    header = await _header(request, config)
    capabilities = meta.capabilities(
        header,
        text=Lane.TEXT in config.lanes,
        embedding=Lane.EMBEDDINGS in config.lanes,
        projector="mmproj" in config.components,
    )
    return web.json_response(
        {
            "modelfile": "",
            "parameters": "",
            "template": "",
            "details": _details(config, header),
            "model_info": meta.model_info(header, config.id),
            "capabilities": capabilities,
            "modified_at": _tag(config, header)["modified_at"],
        }
    )


async def ollama_context(app: web.Application) -> AsyncIterator[None]:
    """The GGUF header cache of the Ollama routes, warmed with every model's file at start."""
    headers = GgufHeaders()
    app[GGUF_HEADERS] = headers
    headers.warm(
        (path, sha)
        for config in app[CATALOG].configs()
        for path, sha in [_main_file(config)]
        if path is not None and path.suffix.lower() == ".gguf"
    )
    yield
    await headers.close()


HANDLERS: dict[str, Handler] = {
    "ollama.tags": tags,
    "ollama.ps": ps,
    "ollama.version": version,
    "ollama.show": show,
    **ollama_manage.HANDLERS,
}
