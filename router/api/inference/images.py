"""The image lane: `/v1/images/...`, `/sdapi/v1/...` and `/sdcpp/v1/...` (docs/media.md).

- `POST /sdapi/v1/options` with `sd_model_checkpoint` loads that image model and remembers it
  as the lane's model; `GET` answers the current one (merged with the backend's own options
  when an image runtime is up). `POST /sdapi/v1/refresh-checkpoints` rescans the catalog.
- Discovery (every GET, and interrupt/skip) goes to the active image runtime and never loads
  one; with none active, list routes answer `[]`, progress answers "idle", others 503. A
  backend without a list, progress, interrupt or skip route (sd-server) gets A1111's answer
  made by the router: progress from the lane's own activity (router/media/a1111.py).
- txt2img/img2img: a missing or negative seed is fixed before sending (as A1111 does), and the
  answer's `info` is A1111's JSON string with that seed and the public model ID.
- Generation selects by `model` / `sd_model_checkpoint` / `override_settings...`, else the
  lane's active runtime, else the remembered model, else the only image configuration.
- sd-server's asynchronous jobs keep their runtime (router/api/inference/sdcpp_jobs.py).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from backends.registry import adapter_for
from router import inference as pipeline
from router.api.inference.sdcpp_jobs import JOB_PATH, JOB_PIN, poll, submit
from router.appkeys import BACKENDS, CATALOG, IMAGES, RUNTIMES, SETTINGS
from router.backend_client import BackendFault
from router.domain import Lane, MiB
from router.edge import Handler, match_of, matched_route, read_json
from router.errors import BadRequest, ServiceUnavailable
from router.forwarding import (
    ModelRewriter,
    Reply,
    Rewrite,
    Selection,
    Translation,
    read_selector,
)
from router.inference import (
    OnLease,
    Override,
    active_view,
    choose_config,
    public_id,
    resolve_for_lane,
)
from router.media import ImageLane, a1111
from router.runtime import Lease, RuntimeView

_SUBMIT = frozenset({"img_gen", "vid_gen"})
_HASH_SUFFIX = re.compile(r"^(.*\S) \[[0-9A-Fa-f]+\]$")  # A1111 titles: "name [hash]"
_LIST_ROUTES = frozenset(
    {
        "loras", "upscalers", "latent-upscale-modes", "samplers", "schedulers",
        "prompt-styles", "hypernetworks", "face-restorers", "realesrgan-models", "sd-vae",
        "sd-modules", "embeddings",
    }
)  # fmt: skip
_CONTROL_POSTS = frozenset({"interrupt", "skip"})
_MADE_HERE = frozenset({"progress", "scripts", *_CONTROL_POSTS})


def lane_state(app: web.Application) -> ImageLane:
    return app[IMAGES]


async def images_context(app: web.Application) -> AsyncIterator[None]:
    """The image lane's memory for the app's life; job watchers end with it."""
    app[IMAGES] = ImageLane()
    yield
    for task in list(app[IMAGES].watchers):
        task.cancel()
    await asyncio.gather(*app[IMAGES].watchers, return_exceptions=True)


def current_model(app: web.Application) -> str | None:
    """The active image runtime's ID, else the remembered one while it still resolves."""
    active = active_view(app, Lane.IMAGE)
    if active is not None:
        return public_id(active.config, Lane.IMAGE)
    remembered = lane_state(app).remembered
    if remembered is not None and app[CATALOG].resolve(remembered) is not None:
        return remembered
    return None


# ---- /sdapi/v1/options and refresh-checkpoints ---------------------------------------------


async def options(request: web.Request) -> web.StreamResponse:
    if request.method == "POST":
        return await _set_options(request)
    answer: dict[str, Any] = {"samples_format": "png"}
    active = active_view(request.app, Lane.IMAGE)
    if active is not None and active.ready:
        answer.update(await _backend_options(request, active))
    answer["sd_model_checkpoint"] = current_model(request.app)
    return web.json_response(answer)


async def _backend_options(request: web.Request, runtime: RuntimeView) -> dict[str, Any]:
    """The backend's own options (a plus, never required): {} when it cannot tell."""
    url = runtime.base_url + "/sdapi/v1/options"
    try:
        reply = await request.app[BACKENDS].fetch("GET", url, deadline=5)
        body = reply.json() if reply.status == 200 else {}
    except BackendFault:
        return {}
    return body if isinstance(body, dict) else {}


async def _set_options(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    wanted = body.get("sd_model_checkpoint")
    if wanted is None:
        return web.json_response(None)  # other A1111 options have no meaning here
    if not isinstance(wanted, str) or not wanted.strip():
        raise BadRequest("sd_model_checkpoint must name an image model", param="model")
    model = _checkpoint_name(request.app, wanted.strip())
    config = resolve_for_lane(request.app, model, Lane.IMAGE)
    await request.app[RUNTIMES].load(config, Lane.IMAGE)
    lane_state(request.app).remembered = model
    return web.json_response(None)


def _checkpoint_name(app: web.Application, wanted: str) -> str:
    """A1111 clients may echo a title as "name [hash]"; accept it when the name resolves."""
    if app[CATALOG].resolve(wanted) is None and (m := _HASH_SUFFIX.match(wanted)):
        return m.group(1)
    return wanted


async def refresh(request: web.Request) -> web.StreamResponse:
    await request.app[CATALOG].refresh()
    return web.json_response(None)


# ---- everything else under /v1/images, /sdapi/v1, /sdcpp/v1 ----------------------------------


def _kind(request: web.Request) -> tuple[str, re.Match[str] | None]:
    tail = match_of(request).params.get("tail", "")
    sdcpp = request.path.startswith("/sdcpp/")
    if sdcpp and (job := JOB_PATH.fullmatch(tail.rstrip("/"))):
        return "job", job
    if sdcpp and request.method == "POST" and tail in _SUBMIT:
        return "submit", None
    if request.method in ("GET", "HEAD") or tail in _CONTROL_POSTS:
        return "discovery", None
    return "generate", None


async def forward(request: web.Request) -> web.StreamResponse:
    kind, job = _kind(request)
    if kind == "job":
        assert job is not None
        return await poll(request, job.group(1))
    if kind == "discovery":
        return await _discovery(request)
    selection = await _selection(request)
    # Another cluster node may serve this model, as sent: a job submitted there is pinned to
    # that node for its polls.
    remember = JOB_PIN if kind == "submit" else None
    if (relayed := await pipeline.relayed(request, selection, remember=remember)) is not None:
        return relayed
    if kind == "submit":
        return await submit(request, selection)
    state = lane_state(request.app)
    token = state.generation_started()
    try:
        return await pipeline.forward_here(request, _generation(request, selection))
    finally:
        state.generation_ended(token)


_A1111_GENERATION = frozenset({"txt2img", "img2img"})


def _generation(request: web.Request, selection: Selection) -> Selection | Override:
    """A1111's txt2img/img2img: the seed fixed before sending, `info` rewritten in the answer.
    A body too large to hold (beyond the selector scan) goes as it is, its answer too."""
    tail = match_of(request).params.get("tail", "")
    if not request.path.startswith("/sdapi/") or tail not in _A1111_GENERATION:
        return selection
    if not selection.complete:
        return selection
    body, fields = a1111.fix_seed(selection.prefix, secrets.randbelow(a1111.SEED_MAX + 1))
    if fields is None:
        return selection
    fixed = Selection(selection.model, body, True, selection.source)
    img2img = tail == "img2img"

    def translation(lease: Lease) -> Translation:
        model = public_id(lease.runtime.config, Lane.IMAGE)
        local = lease.runtime.local_model_id or model
        return _GenerationAnswer(Rewrite(ModelRewriter(model, local)), fields, model, img2img)

    return Override(fixed, on_lease=OnLease(translation=translation))


class _GenerationAnswer:
    """The backend's txt2img/img2img answer, held whole, its `info` made A1111's."""

    def __init__(self, default: Rewrite, fields: dict[str, Any], model: str, img2img: bool) -> None:
        self._default, self._fields, self._model, self._img2img = default, fields, model, img2img
        self._parts: list[bytes] = []

    def reply(self, status: int, content_type: str, length: int | None) -> Reply:
        reply = self._default.reply(status, content_type, length)
        if status != 200 or "json" not in content_type.lower():
            return reply
        return Reply(status, self, reply.fail, whole=True)

    def feed(self, chunk: bytes) -> bytes:
        self._parts.append(chunk)
        return b""

    def flush(self) -> bytes:
        body, self._parts = b"".join(self._parts), []
        return a1111.generation_answer(body, self._fields, self._model, self._img2img)


async def _selection(request: web.Request) -> Selection:
    """The request's own selector, else the lane's current model, else the only image model."""
    scan_limit = int(request.app[SETTINGS].limits.selector_scan_mb * MiB)
    found = await read_selector(request, matched_route(request), scan_limit)
    if found.model is not None:
        return found
    model = current_model(request.app)
    if model is None:
        model = public_id(choose_config(request.app, None, Lane.IMAGE), Lane.IMAGE)
    return Selection(model, found.prefix, found.complete, "image-lane")


async def _discovery(request: web.Request) -> web.StreamResponse:
    active = active_view(request.app, Lane.IMAGE)
    tail = match_of(request).params.get("tail", "")
    sdapi = request.path.startswith("/sdapi/")
    if active is not None and not (sdapi and _made_here(active, request, tail)):
        model = public_id(active.config, Lane.IMAGE)
        return await pipeline.forward(request, Selection(model, b"", not request.body_exists))
    if sdapi and tail in _LIST_ROUTES:
        return web.json_response([])
    if sdapi and tail == "progress":
        return web.json_response(a1111.progress_record(_activity(request.app, active)))
    if sdapi and tail == "interrupt":
        # A1111's answer. sd-server cannot stop a generation it runs (docs/media.md), so the
        # generation in flight finishes; nothing else is running to stop.
        return web.json_response(a1111.INTERRUPT_ANSWER)
    if sdapi and tail == "skip":
        return web.json_response(a1111.SKIP_ANSWER)
    if sdapi and tail == "scripts":
        return web.json_response(a1111.NO_SCRIPTS)
    raise ServiceUnavailable(
        f"{request.path} answers from the active image model and none is loaded: select one "
        'with POST /sdapi/v1/options {"sd_model_checkpoint": "<id>"} (ids: GET '
        "/sdapi/v1/sd-models), a generation naming a model, or POST /router/v1/load"
    )


def _made_here(active: RuntimeView, request: web.Request, tail: str) -> bool:
    """An A1111 route the active backend lacks but whose answer the router can give."""
    made = tail in _LIST_ROUTES or tail in _MADE_HERE
    return made and not adapter_for(active.family).serves(request.path, request.method)


def _activity(app: web.Application, active: RuntimeView | None) -> a1111.LaneActivity:
    if active is None:
        return a1111.LaneActivity(0, 0, None, None)
    waiting = app[RUNTIMES].queue_length(Lane.IMAGE)
    started = lane_state(app).oldest_generation()
    model = public_id(active.config, Lane.IMAGE)
    return a1111.LaneActivity(active.leases, waiting, started, model)


HANDLERS: dict[str, Handler] = {
    "sdapi.options": options,
    "sdapi.refresh": refresh,
    "images.forward": forward,
}
