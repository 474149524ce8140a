"""ComfyUI routes: /prompt, /history, /view and /upload/image (docs/comfy.md).

Still-image workflows and everything the router did not mint go to the backend unchanged;
video workflows are answered here and rendered in the background by `router.comfy.jobs` on
the image runtime that is active when they arrive. Uploads are kept by the router (and teed to
KoboldCpp, whose own image workflows reference the name it answers with).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from router.appkeys import BACKENDS, CATALOG, COMFY, INFLIGHT, RUNTIMES, SETTINGS
from router.backend_client import BackendFault
from router.comfy import (
    check_upload_name,
    history_entry,
    inspect_workflow,
    is_audio_upload,
    kobold_txt2img,
    resolve_media,
    sdcpp_vid_gen,
)
from router.comfy.jobs import BackendCall, Job, JobRunner, JobState
from router.comfy.serve import serve_file
from router.comfy.state import ComfyState
from router.comfy.uploads import UploadStore, private_dir
from router.comfy.workflow import VideoPlan
from router.config import ModelConfig, Settings
from router.domain import BackendMode, Lane, MiB
from router.edge import Handler, match_of, matched_route, parse_json_object, read_body
from router.errors import BadGateway, BadRequest, NotFound, PayloadTooLarge, ServiceUnavailable
from router.forwarding import (
    Selection,
    body_kind,
    boundary_of,
    select_from_body,
    select_from_request_parts,
)
from router.inference import Override, active_view, choose_config, forward
from router.media import ffmpeg as media_ffmpeg
from router.media import parse_form

log = logging.getLogger(__name__)
FORM_SLACK = 1 * MiB  # multipart framing and small fields around the 32 MiB file itself
_VIEW_TYPES = frozenset({"output", "input", "temp"})


# ---- shared helpers ---------------------------------------------------------------------


def _selection(request: web.Request, raw: bytes) -> Selection:
    """The request's model selector, found the ordinary way in a body already read in full."""
    rule = matched_route(request).selector
    ctype = request.headers.get("Content-Type", "")
    found = select_from_body(raw, True, ctype, rule)
    model, source = select_from_request_parts(rule, found, request.query, request.headers)
    return Selection(model, raw, True, source)


def _image_configs(request: web.Request) -> list[ModelConfig]:
    return [c for c in request.app[CATALOG].configs() if Lane.IMAGE in c.lanes]


def _kobold_behind(request: web.Request) -> bool:
    """Would a fall-through reach KoboldCpp (the only backend with ComfyUI routes)?"""
    active = active_view(request.app, Lane.IMAGE)
    if active is not None:
        return active.config.backend_mode is BackendMode.KOBOLD
    return any(c.backend_mode is BackendMode.KOBOLD for c in _image_configs(request))


# ---- POST /prompt -----------------------------------------------------------------------


async def prompt(request: web.Request) -> web.StreamResponse:
    if request.method != "POST":
        return await forward(request)
    cap = int(request.app[SETTINGS].limits.workflow_media_mb * MiB)
    raw = await read_body(request, cap, "limits.workflow_media_mb")
    payload = parse_json_object(raw)
    if "prompt" not in payload:
        raise BadRequest("No prompt provided", code="no_prompt", param="prompt")
    plan = inspect_workflow(payload["prompt"])
    if plan is None:
        return await forward(request, Override(_selection(request, raw)))
    return await _submit_video(request, payload, plan)


async def _submit_video(
    request: web.Request, payload: dict[str, Any], plan: VideoPlan
) -> web.StreamResponse:
    settings, state = request.app[SETTINGS], request.app[COMFY]
    ffmpeg = await media_ffmpeg.locate(settings.media.ffmpeg)
    if ffmpeg is None:  # refuse now rather than accept a job that can never finish
        raise ServiceUnavailable(
            "ComfyUI video workflows need ffmpeg to produce MP4, and no working ffmpeg was "
            "found on this node (media.ffmpeg, PATH, imageio-ffmpeg); the job was not accepted",
            code="ffmpeg_unavailable",
        )
    active = active_view(request.app, Lane.IMAGE)
    if active is None:
        raise BadRequest(
            "a video workflow runs on the active image model and none is loaded; load one "
            "first (POST /router/v1/load, or any image request)",
            code="no_active_image_model",
        )
    prompt_id = _prompt_id(payload, state.jobs)
    call = await _backend_call(active.config, payload["prompt"], plan, state, settings)
    number = payload.get("number")
    if isinstance(number, bool) or not isinstance(number, int | float):
        number = state.jobs.next_number()
    node_id = plan.output_ids[-1] if plan.output_ids else plan.sampler_id
    state.jobs.submit(Job(prompt_id, number, node_id, plan.fps), call, ffmpeg)
    return web.json_response({"prompt_id": prompt_id, "number": number, "node_errors": {}})


def _prompt_id(payload: dict[str, Any], jobs: JobRunner) -> str:
    given = payload.get("prompt_id")
    if given is None:
        return str(uuid.uuid4())
    try:
        prompt_id = str(uuid.UUID(str(given)))
    except ValueError:
        raise BadRequest("prompt_id must be a UUID", code="invalid_prompt_id") from None
    if jobs.get(prompt_id) is not None:
        raise BadRequest("prompt_id is already in use", code="invalid_prompt_id")
    return prompt_id


async def _backend_call(
    config: ModelConfig, graph: Any, plan: VideoPlan, state: ComfyState, settings: Settings
) -> BackendCall:
    """Every media and size check happens here, before the job is accepted."""
    media = resolve_media(graph, plan)
    cap = int(settings.limits.workflow_media_mb * MiB)
    load = state.uploads.load
    if config.backend_mode is BackendMode.KOBOLD:
        body = await asyncio.to_thread(kobold_txt2img, plan, media, load, max_media_bytes=cap)
        return BackendCall("kobold", config, body)
    if config.backend_mode is BackendMode.LLAMA_SDCPP:
        body = await asyncio.to_thread(sdcpp_vid_gen, plan, media, load, max_media_bytes=cap)
        # MJPG-AVI: every sd-server build writes it (WebM needs an optional library).
        body["output_format"] = "avi"
        return BackendCall("sdcpp", config, body)
    raise BadRequest(f"backend_mode {config.backend_mode} does not generate video")


# ---- /history ---------------------------------------------------------------------------


def _record(job: Job) -> dict[str, Any]:
    """ComfyUI's /history shape: `{}` while running, an error status when the job failed."""
    if job.state is JobState.RUNNING:
        return {}
    if job.state is JobState.SUCCESS and job.filename:
        entry = history_entry(job.prompt_id, job.filename, node_id=job.node_id, frame_rate=job.fps)
        entry[job.prompt_id]["prompt"][0] = job.number
        return entry
    failure = {
        "prompt_id": job.prompt_id,
        "node_id": job.node_id,
        "exception_message": job.error or "the job failed",
        "exception_type": "RuntimeError",
        "timestamp": int((job.finished or time.time()) * 1000),
    }
    status = {"status_str": "error", "completed": False, "messages": [["execution_error", failure]]}
    prompt = [job.number, job.prompt_id, {}, {}, [job.node_id]]
    return {job.prompt_id: {"prompt": prompt, "outputs": {}, "status": status, "meta": {}}}


async def history(request: web.Request) -> web.StreamResponse:
    if request.method == "POST":
        return await _history_post(request)
    prompt_id = match_of(request).params.get("prompt_id")
    jobs = request.app[COMFY].jobs
    if prompt_id is None:
        return web.json_response(await _history_all(request, jobs))
    job = jobs.get(prompt_id)
    if job is not None:
        return web.json_response(_record(job))
    if _kobold_behind(request):
        return await forward(request)
    return web.json_response({})  # ComfyUI's answer for an unknown prompt


async def _history_all(request: web.Request, jobs: JobRunner) -> dict[str, Any]:
    """The backend's history (only from a KoboldCpp already up), then the router's jobs."""
    merged: dict[str, Any] = {}
    active = active_view(request.app, Lane.IMAGE)
    if active is not None and active.ready and active.config.backend_mode is BackendMode.KOBOLD:
        merged.update(await _backend_history(request, active.config))
    finished = [j for j in jobs.jobs() if j.state is not JobState.RUNNING]
    max_items = request.query.get("max_items", "")
    if max_items.isdigit():
        finished = finished[-int(max_items) :] if int(max_items) else []
    for job in finished:
        merged.update(_record(job))
    return merged


async def _backend_history(request: web.Request, config: ModelConfig) -> dict[str, Any]:
    async with request.app[RUNTIMES].lease(config, Lane.IMAGE) as lease:
        url = lease.base_url + request.rel_url.raw_path_qs
        try:
            reply = await request.app[BACKENDS].fetch("GET", url)
            body = reply.json() if reply.status == 200 else None
        except BackendFault as exc:
            log.warning("backend /history failed: %s", exc.message)
            return {}
    return body if isinstance(body, dict) else {}


async def _history_post(request: web.Request) -> web.StreamResponse:
    cap = int(request.app[SETTINGS].limits.max_control_body_mb * MiB)
    raw = await read_body(request, cap, "limits.max_control_body_mb")
    clear, delete = history_edits(parse_json_object(raw))
    jobs = request.app[COMFY].jobs
    if clear:
        for job in jobs.jobs():
            jobs.forget(job.prompt_id)
    for prompt_id in delete:
        jobs.forget(prompt_id)
    active = active_view(request.app, Lane.IMAGE)
    if active is not None and active.config.backend_mode is BackendMode.KOBOLD:
        return await forward(request, Override(Selection(None, raw, True)))
    return web.Response(status=200)


def history_edits(body: dict[str, Any]) -> tuple[bool, list[str]]:
    """ComfyUI's `{"clear": bool, "delete": [prompt_id, ...]}`; other keys are the backend's."""
    clear, delete = body.get("clear", False), body.get("delete", [])
    if not isinstance(clear, bool):
        raise BadRequest("clear must be true or false", param="clear")
    if delete is None:
        delete = []
    if not isinstance(delete, list) or not all(isinstance(p, str) for p in delete):
        raise BadRequest("delete must be a list of prompt ids", param="delete")
    return clear, delete


# ---- GET /view --------------------------------------------------------------------------


def _check_view_query(request: web.Request) -> tuple[str, str, str] | None:
    """(filename, subfolder, type) of a well-formed query; 400 for traversal attempts."""
    query = request.query
    if "filename" not in query:
        return None
    filename = check_upload_name(query["filename"])
    subfolder = query.get("subfolder", "")
    if subfolder:
        for part in subfolder.split("/"):
            check_upload_name(part)
    type_ = query.get("type", "output")
    if type_ not in _VIEW_TYPES:
        raise BadRequest("type must be output, input or temp")
    return filename, subfolder, type_


async def view(request: web.Request) -> web.StreamResponse:
    wanted = None if "tail" in match_of(request).params else _check_view_query(request)
    if wanted is not None:
        filename, subfolder, type_ = wanted
        path = request.app[COMFY].jobs.output_path(filename)
        if path is not None and type_ == "output" and not subfolder:
            return await serve_file(request, path, filename)
    if _kobold_behind(request):
        return await forward(request)
    raise NotFound("file not found")


# ---- POST /upload/image -----------------------------------------------------------------


async def upload(request: web.Request) -> web.StreamResponse:
    state, settings = request.app[COMFY], request.app[SETTINGS]
    cap = int(settings.limits.upload_mb * MiB)
    raw = await read_body(request, cap + FORM_SLACK, "limits.upload_mb")
    ctype = request.headers.get("Content-Type", "")
    boundary = boundary_of(ctype) if body_kind(ctype) == "multipart" else None
    if boundary is None:
        raise BadRequest("send the upload as multipart/form-data with an `image` file part")
    parts = {p.name: p for p in reversed(parse_form(raw, boundary))}  # first of a name wins
    file = parts.get("image") or parts.get("file")
    if file is None or file.filename is None:
        raise BadRequest("the form has no `image` file part")
    if len(file.data) > cap:
        raise PayloadTooLarge(
            f"an upload may be at most {cap // MiB} MiB (limits.upload_mb)", code="upload_too_large"
        )
    name = check_upload_name(file.filename)
    subfolder = _field(parts, "subfolder")
    for part in subfolder.split("/") if subfolder else ():
        check_upload_name(part)
    type_ = _field(parts, "type") or "input"
    if type_ not in _VIEW_TYPES:
        raise BadRequest("type must be input, temp or output")
    kind = "audio" if is_audio_upload(name, file.content_type) else "image"
    await asyncio.to_thread(state.uploads.save, name, file.data, kind)
    config = _upload_target(request, _selection(request, raw).model)
    if config is None or config.backend_mode is not BackendMode.KOBOLD:
        return web.json_response({"name": name, "subfolder": subfolder, "type": type_})
    return await _tee(request, config, raw, name, file.data, kind)


def _field(parts: dict[str, Any], name: str) -> str:
    part = parts.get(name)
    return part.data.decode("utf-8", "replace").strip() if part is not None else ""


def _upload_target(request: web.Request, model: str | None) -> ModelConfig | None:
    """KoboldCpp to tee to, or None when the image lane has no ComfyUI backend."""
    if model is None and active_view(request.app, Lane.IMAGE) is None:
        if all(c.backend_mode is not BackendMode.KOBOLD for c in _image_configs(request)):
            return None
    return choose_config(request.app, model, Lane.IMAGE)


async def _tee(
    request: web.Request, config: ModelConfig, raw: bytes, name: str, data: bytes, kind: str
) -> web.StreamResponse:
    """KoboldCpp gets the upload unchanged; its answer goes back verbatim, and the router also
    keeps the file under the name KoboldCpp assigned (always kcpp_img2img.jpg in 1.116)."""
    headers = {"Content-Type": request.headers["Content-Type"]}
    async with request.app[RUNTIMES].lease(config, Lane.IMAGE) as lease:
        url = lease.base_url + "/upload/image"
        try:
            reply = await request.app[BACKENDS].fetch("POST", url, data=raw, headers=headers)
        except BackendFault as exc:
            raise BadGateway(f"KoboldCpp did not take the upload: {exc.message}") from None
    answer, status = reply.body, reply.status
    answer_type = reply.content_type or "application/json"
    assigned = _assigned_name(answer) if 200 <= status < 300 else None
    if assigned and assigned != name:
        await asyncio.to_thread(request.app[COMFY].uploads.save, assigned, data, kind)
    return web.Response(
        body=answer,
        status=status,
        headers={"Content-Type": answer_type, "X-Content-Type-Options": "nosniff"},
    )


def _assigned_name(answer: bytes) -> str | None:
    try:
        name = json.loads(answer).get("name")
        return check_upload_name(name)
    except (ValueError, AttributeError, BadRequest):
        return None


# ---- lifecycle --------------------------------------------------------------------------


def scratch_root(settings: Settings) -> Path:
    """`media.scratch_dir`, else `scratch/` next to the router database; ComfyUI files go in
    a private `comfy/` folder inside it."""
    base = settings.media.scratch_dir
    if base is None:
        db = settings.analytics.database_path
        base = (db.parent if db is not None else Path.cwd() / "data") / "scratch"
    return base / "comfy"


async def comfy_context(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx entry (after the runtimes): jobs are cancelled before backends stop."""
    settings = app[SETTINGS]
    root = await asyncio.to_thread(private_dir, scratch_root(settings))
    uploads = UploadStore(root / "uploads", int(settings.limits.upload_mb * MiB))
    app[COMFY] = ComfyState(uploads, JobRunner(root, app[BACKENDS], app[RUNTIMES], app[INFLIGHT]))
    yield
    await app[COMFY].jobs.close()


HANDLERS: dict[str, Handler] = {
    "comfy.prompt": prompt,
    "comfy.history": history,
    "comfy.view": view,
    "comfy.upload": upload,
}
