"""Operational vLLM routes, `/router/v1/vllm/{op}` (admin only): a short, fixed list.

Only health, version, load (vLLM's request-load gauge), metrics and tokenizer info are always
reachable; dynamic LoRA only when the config's serve_args carry `--enable-lora`, elastic expert
parallelism only with `--enable-elastic-ep`. Every other path under the prefix is a 404 from
the route table (development, profiler, RPC, weight transfer, sleep: S23).

The runtime is the one `?model=` (or X-Tensors-Model) names, else the only running vLLM
runtime. These calls never load a model and hold no lease: an operator polling metrics must
neither keep a model resident nor wake one up, so a model that is not running is a 503.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from router import inference as pipeline
from router.appkeys import CATALOG, RAW_BODY, RUNTIMES, SETTINGS
from router.config import Settings
from router.domain import BackendMode, Family, Lane
from router.edge import Handler, arrived, matched_route, read_json
from router.errors import (
    BadRequest,
    ModelNotFound,
    RouteNotFound,
    ServiceUnavailable,
)
from router.forwarding import read_selector
from router.records import RequestInfo
from router.runtime import RuntimeView

# op (the last segment of the route template) -> vLLM's own path.
BACKEND_PATH: dict[str, str] = {
    "health": "/health",
    "version": "/version",
    "load": "/load",
    "metrics": "/metrics",
    "tokenizer_info": "/tokenizer_info",
    "load_lora_adapter": "/v1/load_lora_adapter",
    "unload_lora_adapter": "/v1/unload_lora_adapter",
    "scale_elastic_ep": "/scale_elastic_ep",
    "is_scaling_elastic_ep": "/is_scaling_elastic_ep",
}
# Ops that exist only when the model was started with the feature on.
REQUIRED_FLAG: dict[str, str] = {
    "load_lora_adapter": "--enable-lora",
    "unload_lora_adapter": "--enable-lora",
    "scale_elastic_ep": "--enable-elastic-ep",
    "is_scaling_elastic_ep": "--enable-elastic-ep",
}
_LANE_ORDER = (Lane.TEXT, Lane.EMBEDDINGS, Lane.VOICE)


async def admin(request: web.Request) -> web.StreamResponse:
    route = matched_route(request)
    op = route.template.rsplit("/", 1)[1]
    runtime = await _pick_runtime(request)
    flag = REQUIRED_FLAG.get(op)
    if flag is not None and not has_flag(runtime.config.serve_args, flag):
        raise RouteNotFound(request.path)  # as if the op did not exist, like vLLM without it
    body = await _control_body(request) if request.method == "POST" else None
    if op == "load_lora_adapter" and body is not None:
        check_lora_path(json.loads(body), runtime.config.path.parent, request.app[SETTINGS])
    info = RequestInfo(route.template, route.surface.value, None, arrived(request), time.time())
    info.model = runtime.config.id
    return await pipeline.forward_to(request, runtime, BACKEND_PATH[op], body, info)


async def _pick_runtime(request: web.Request) -> RuntimeView:
    """The ready vLLM runtime to ask: a snapshot, since these calls hold no lease."""
    selection = await read_selector(request, matched_route(request), 0)
    running = [v for v in request.app[RUNTIMES].views() if v.family is Family.VLLM and v.ready]
    running.sort(key=lambda v: _LANE_ORDER.index(v.lane))
    if selection.model is None:
        configs = {v.config.id for v in running}
        if not running:
            raise ServiceUnavailable("no vLLM model is running; load one with /router/v1/load")
        if len(configs) > 1:
            raise BadRequest(
                f"several vLLM models are running ({', '.join(sorted(configs))}): "
                "name one with ?model=",
                param="model",
            )
        return running[0]
    config = request.app[CATALOG].resolve(selection.model)
    if config is None:
        raise ModelNotFound(selection.model)
    if config.backend_mode is not BackendMode.VLLM:
        raise BadRequest(f"model {config.id!r} is not served by vLLM", param="model")
    ours = [v for v in running if v.config.id == config.id]
    if not ours:
        raise ServiceUnavailable(
            f"model {config.id!r} is not running; load it with /router/v1/load"
        )
    return ours[0]


async def _control_body(request: web.Request) -> bytes:
    """The raw JSON body (forwarded byte for byte), capped at limits.max_control_body_mb."""
    await read_json(request, types=None)  # a JSON object, or a clear 400
    return request[RAW_BODY] or b"{}"


def has_flag(serve_args: tuple[str, ...], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in serve_args)


def check_lora_path(body: dict[str, Any], config_dir: Path, settings: Settings) -> None:
    """`lora_path` follows the serve_args file rules: no `..`; absolute paths under file_roots."""
    value = body.get("lora_path")
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise BadRequest('"lora_path" must be a non-empty string', param="lora_path")
    path = Path(value)
    if ".." in path.parts:
        raise BadRequest('"lora_path" may not contain ".."', param="lora_path")
    roots = [config_dir, *settings.models.file_roots]
    if (
        path.is_absolute()
        and settings.models.file_roots
        and not any(path.is_relative_to(root) for root in roots)
    ):
        raise BadRequest('"lora_path" is outside models.file_roots', param="lora_path")


HANDLERS: dict[str, Handler] = {"vllm.admin": admin}
