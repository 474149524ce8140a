"""sd-server's asynchronous jobs (`/sdcpp/v1/img_gen`, `vid_gen`, `jobs/<id>`): docs/media.md.

A submission's lease is held until its job ends, so no swap or idle unload loses the job, and
its polls go to that runtime; a job whose runtime is gone is a 404 in sd-server's own shape.
A job submitted on another cluster node is pinned there (`JOB_PIN`) and polled there.
router/api/inference/images.py tells these requests from the rest of the image lane.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from aiohttp import web

from router import inference as pipeline
from router.appkeys import BACKENDS, IMAGES, RUNTIMES
from router.backend_client import BackendFault
from router.domain import Family, Lane, family_for
from router.edge import arrived, caller_of, control_cap, matched_route, queue_wait, read_body
from router.errors import BadRequest, JobNotFound
from router.forwarding import Selection, body_stream
from router.inference import admit, public_id, resolve_for_lane
from router.media import ImageLane
from router.records import RequestInfo
from router.runtime import Lease, Runtime

JOB_POLL_S = 1.0
JOB_HOLD_MAX_S = 3600.0  # a job sd-server never finishes must not pin the lane forever
JOB_PATH = re.compile(r"jobs/([A-Za-z0-9_-]+)(/cancel)?")  # a job's poll or cancel, below /sdcpp/v1
_TERMINAL = frozenset({"completed", "failed", "cancelled"})
# The cluster pin of a job submitted on another node: its polls follow it there.
JOB_PIN = "sdcpp-job:"


async def submit(request: web.Request, selection: Selection) -> web.StreamResponse:
    """Send a job to sd-server here; its receipt keeps the runtime leased until the job ends."""
    assert selection.model is not None
    config = resolve_for_lane(request.app, selection.model, Lane.IMAGE)
    if family_for(config.backend_mode, Lane.IMAGE) is not Family.SDCPP:
        raise BadRequest(
            f"{request.path} is stable-diffusion.cpp's job API and {selection.model!r} does not "
            "run on sd-server; use /sdapi/v1/txt2img or /v1/images/generations"
        )
    admit(request, selection.model)  # a scoped key's model list and quota (403 / 429)
    info = _info(request, selection.model)
    # Queued as its key's caller: its class, fairness name and cap (policy.decide).
    lease = await request.app[RUNTIMES].ensure(config, Lane.IMAGE, caller=caller_of(request))
    info.queue_wait_ms = lease.queue_wait_ms
    queue_wait.note(request, lease.queue_wait_ms)  # the submission waited for its runtime
    held = False
    try:
        body = _job_body(request, selection)
        response = await _direct(request, lease.runtime, body, info)
        job_id = _receipt_id(response)
        if job_id is not None:
            state = request.app[IMAGES]
            state.remember_job(job_id, lease.runtime)
            _watch(request.app, state, job_id, lease)
            held = True
        return response
    finally:
        if not held:
            lease.release()


def _job_body(request: web.Request, selection: Selection) -> bytes | Any:
    if selection.complete:
        return selection.prefix
    return body_stream(selection, request)


def _receipt_id(response: web.StreamResponse) -> str | None:
    # A job receipt is a few hundred bytes with a length, so the proxy answers it in one piece.
    body = response.body if isinstance(response, web.Response) else None
    if response.status != 202 or not isinstance(body, bytes | bytearray):
        return None
    try:
        receipt = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    job_id = receipt.get("id") if isinstance(receipt, dict) else None
    return job_id if isinstance(job_id, str) and JOB_PATH.fullmatch(f"jobs/{job_id}") else None


def _watch(app: web.Application, state: ImageLane, job_id: str, lease: Lease) -> None:
    task = asyncio.get_running_loop().create_task(_hold_until_done(app, job_id, lease))
    state.watchers.add(task)
    task.add_done_callback(state.watchers.discard)


async def _hold_until_done(app: web.Application, job_id: str, lease: Lease) -> None:
    """Keep the runtime leased while sd-server works on the job: swaps and idle unloads wait."""
    deadline = time.monotonic() + JOB_HOLD_MAX_S
    url = f"{lease.base_url}/sdcpp/v1/jobs/{job_id}"
    pause = 0.05  # fast at first: most jobs on a warm model end within seconds
    try:
        while time.monotonic() < deadline and app[RUNTIMES].is_serving(lease.runtime):
            await asyncio.sleep(pause)
            pause = min(pause * 2, JOB_POLL_S)
            reply = await app[BACKENDS].fetch("GET", url, deadline=10)
            job = reply.json() if reply.status == 200 else None
            if not isinstance(job, dict) or job.get("status") in _TERMINAL:
                return
    except (BackendFault, RuntimeError):
        return  # the runtime went away (or the router is closing): nothing left to hold
    finally:
        lease.release()


async def _poll_remote(request: web.Request, job_id: str) -> web.StreamResponse | None:
    async def body() -> Selection:
        sent = await read_body(request, control_cap(request)) if request.body_exists else b""
        return Selection(None, sent, True)

    return await pipeline.followed(request, JOB_PIN + job_id, "job", body)


async def poll(request: web.Request, job_id: str) -> web.StreamResponse:
    """A job's status or cancel, sent to the node and runtime that run the job."""
    remote = await _poll_remote(request, job_id)
    if remote is not None:
        return remote
    runtime = request.app[IMAGES].jobs.get(job_id)
    # A draining runtime still serves the job it is finishing; a stopped one never saw it.
    if runtime is None or not request.app[RUNTIMES].is_serving(runtime):
        raise JobNotFound()
    info = _info(request, public_id(runtime.config, Lane.IMAGE))
    body = await read_body(request, control_cap(request)) if request.body_exists else None
    return await _direct(request, runtime, body, info)


async def _direct(
    request: web.Request, runtime: Runtime, body: Any, info: RequestInfo
) -> web.StreamResponse:
    """Forward to one known runtime (job polls must not be re-routed by model selection)."""
    return await pipeline.forward_to(request, runtime, request.rel_url.raw_path_qs, body, info)


def _info(request: web.Request, model: str) -> RequestInfo:
    route = matched_route(request)
    started = arrived(request)
    info = RequestInfo(route.template, route.surface.value, Lane.IMAGE.value, started, time.time())
    info.model = model
    return info
