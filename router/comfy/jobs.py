"""ComfyUI video jobs: the registry of router-minted prompt IDs and the background runner.

A job holds a lease on the image runtime that was active when it was accepted for as long as
the backend works (one KoboldCpp txt2img call, or an sd-server vid_gen job polled to the
end), then releases it and transcodes the result to MP4 under `<scratch>/outputs`. Only names
the runner minted are ever served from there. Jobs are cancelled when the router stops.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from router.backend_client import BackendClient, Reply
from router.comfy.transcode import TranscodeError, container_of, transcode
from router.config import ModelConfig
from router.domain import Lane
from router.edge.inflight import InFlight
from router.errors import RouterError, ServiceUnavailable, sanitize
from router.runtime import RuntimeManager

log = logging.getLogger(__name__)

MAX_RUNNING = 64  # matches the per-lane queue bound; beyond it submissions get 503
MAX_KEPT = 256  # finished jobs remembered (and their files kept); the oldest go first
BACKEND_TIMEOUT = 3600.0  # one clip; a backend silent for longer is treated as hung
_POLL_START, _POLL_MAX = 0.05, 1.0
_ERROR_CHARS = 300
_STOPPED = "the router stopped before the job finished"


class JobState(StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"


class JobFailed(Exception):
    """The backend or ffmpeg failed; the message is shown in /history."""


@dataclass
class Job:
    prompt_id: str
    number: float
    node_id: str  # the workflow's video sink: clients look outputs up by it
    fps: float
    state: JobState = JobState.RUNNING
    filename: str | None = None
    error: str | None = None
    created: float = field(default_factory=time.time)
    finished: float | None = None


@dataclass(frozen=True)
class BackendCall:
    """What generates the clip: `kind` "kobold" (/sdapi/v1/txt2img) or "sdcpp" (vid_gen)."""

    kind: str
    config: ModelConfig
    body: dict[str, Any]


def _excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    with contextlib.suppress(ValueError):
        parsed = json.loads(text)
        if isinstance(parsed, dict) and "error" in parsed:
            err = parsed["error"]
            text = err.get("message", str(err)) if isinstance(err, dict) else str(err)
    return sanitize(text[:_ERROR_CHARS])


def _decode(value: Any, what: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise JobFailed(f"the backend's answer has no {what}")
    if value.startswith("data:") and "," in value:
        value = value.split(",", 1)[1]
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise JobFailed(f"the backend's {what} is not valid base64") from None


def _json(reply: Reply, what: str) -> dict[str, Any]:
    if reply.status >= 400:
        raise JobFailed(f"{what} failed with HTTP {reply.status}: {_excerpt(reply.body)}")
    try:
        body = json.loads(reply.body)
    except ValueError:
        raise JobFailed(f"{what} answered with something that is not JSON") from None
    if not isinstance(body, dict):
        raise JobFailed(f"{what} answered with an unexpected JSON shape")
    return body


async def kobold_video(client: BackendClient, base: str, body: dict[str, Any]) -> bytes:
    """KoboldCpp renders the clip in one call and answers with the container in `images[0]`."""
    reply = await client.fetch("POST", f"{base}/sdapi/v1/txt2img", json=body)
    answer = _json(reply, "KoboldCpp /sdapi/v1/txt2img")
    images = answer.get("images")
    return _decode(images[0] if isinstance(images, list) and images else None, "video")


async def sdcpp_video(client: BackendClient, base: str, body: dict[str, Any]) -> bytes:
    reply = await client.fetch("POST", f"{base}/sdcpp/v1/vid_gen", json=body)
    submitted = _json(reply, "sd-server /sdcpp/v1/vid_gen")
    job_id = submitted.get("id")
    if not isinstance(job_id, str) or not job_id.replace("_", "").replace("-", "").isalnum():
        raise JobFailed("sd-server did not return a job id")
    try:
        return await _poll_sdcpp(client, base, job_id)
    except asyncio.CancelledError:
        # Router shutdown: a queued job would otherwise still run on the backend.
        with contextlib.suppress(Exception):
            await asyncio.shield(_cancel_sdcpp(client, base, job_id))
        raise


async def _poll_sdcpp(client: BackendClient, base: str, job_id: str) -> bytes:
    delay = _POLL_START
    while True:
        reply = await client.fetch("GET", f"{base}/sdcpp/v1/jobs/{job_id}")
        job = _json(reply, f"sd-server job {job_id}")
        status = job.get("status")
        if status == "completed":
            result = job.get("result") or {}
            return _decode(result.get("b64_json") if isinstance(result, dict) else None, "video")
        if status in ("failed", "cancelled"):
            err = job.get("error") or {}
            message = err.get("message") if isinstance(err, dict) else str(err)
            raise JobFailed(f"sd-server job {status}: {sanitize(str(message))[:_ERROR_CHARS]}")
        await asyncio.sleep(delay)
        delay = min(delay * 2, _POLL_MAX)


async def _cancel_sdcpp(client: BackendClient, base: str, job_id: str) -> None:
    await client.fetch("POST", f"{base}/sdcpp/v1/jobs/{job_id}/cancel", deadline=2)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _clear(folder: Path) -> None:
    for entry in folder.iterdir():
        if entry.is_symlink() or entry.is_file():
            entry.unlink(missing_ok=True)


class JobRunner:
    def __init__(
        self,
        scratch: Path,
        client: BackendClient,
        runtimes: RuntimeManager,
        inflight: InFlight | None = None,
    ) -> None:
        self.outputs = scratch / "outputs"
        self.work = scratch / "work"
        for folder in (self.outputs, self.work):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            _clear(folder)  # jobs live in memory: files of an earlier run can never be served
        self._client = client
        self._runtimes = runtimes
        self._inflight = inflight  # a running job counts in the graceful stop's drain (R27)
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._minted: dict[str, str] = {}  # output file name -> prompt id
        self._tasks: set[asyncio.Task[None]] = set()
        self._numbers = 0

    def get(self, prompt_id: str) -> Job | None:
        return self._jobs.get(prompt_id)

    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def next_number(self) -> int:
        self._numbers += 1
        return self._numbers

    def output_path(self, filename: str) -> Path | None:
        """The file of a finished job, only for a name the runner minted."""
        job = self._jobs.get(self._minted.get(filename, ""))
        if job is None or job.state is not JobState.SUCCESS:
            return None
        return self.outputs / filename

    def submit(self, job: Job, call: BackendCall, ffmpeg: str) -> None:
        if job.prompt_id in self._jobs:
            raise ValueError("prompt id already used")
        if len(self._tasks) >= MAX_RUNNING:
            raise ServiceUnavailable("too many ComfyUI video jobs are running", retry_after=30)
        self._jobs[job.prompt_id] = job
        self._forget_oldest()
        task = asyncio.get_running_loop().create_task(self._run(job, call, ffmpeg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._inflight is not None:
            self._inflight.hold_task(task)

    def forget(self, prompt_id: str) -> None:
        """Drop a finished job and its file (POST /history delete/clear)."""
        job = self._jobs.get(prompt_id)
        if job is None or job.state is JobState.RUNNING:
            return
        del self._jobs[prompt_id]
        if job.filename:
            self._minted.pop(job.filename, None)
            (self.outputs / job.filename).unlink(missing_ok=True)

    def _forget_oldest(self) -> None:
        finished = [j.prompt_id for j in self._jobs.values() if j.state is not JobState.RUNNING]
        for prompt_id in finished[: max(0, len(self._jobs) - MAX_KEPT)]:
            self.forget(prompt_id)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, job: Job, call: BackendCall, ffmpeg: str) -> None:
        try:
            raw = await asyncio.wait_for(self._generate(call), BACKEND_TIMEOUT)
            await self._finish(job, raw, ffmpeg)
        except asyncio.CancelledError:
            self._fail(job, _STOPPED)
            raise
        except TimeoutError:
            self._fail(job, f"the backend did not finish within {BACKEND_TIMEOUT:.0f} s")
        except (JobFailed, TranscodeError) as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # ffmpeg's runner turns a cancel into
                self._fail(job, _STOPPED)  # a failure; keep the cancel going
                raise asyncio.CancelledError from None
            self._fail(job, str(exc))
        # The runtime could not be leased (load failed, shutdown), or the backend connection
        # failed (the client's BackendFault says how).
        except RouterError as exc:
            self._fail(job, sanitize(exc.message)[:_ERROR_CHARS])
        except Exception as exc:  # a job must end in a state /history can show
            log.exception("ComfyUI video job %s failed", job.prompt_id)
            self._fail(job, sanitize(f"internal error: {exc}")[:_ERROR_CHARS])

    async def _generate(self, call: BackendCall) -> bytes:
        async with self._runtimes.lease(call.config, Lane.IMAGE) as lease:
            if call.kind == "kobold":
                return await kobold_video(self._client, lease.base_url, call.body)
            return await sdcpp_video(self._client, lease.base_url, call.body)

    async def _finish(self, job: Job, raw: bytes, ffmpeg: str) -> None:
        found = container_of(raw)
        if found is None:
            raise JobFailed("the backend returned a video container the router does not know")
        demuxer, ext = found
        src = self.work / f"{job.prompt_id}.{ext}"
        filename = f"tensor_router_{job.prompt_id}.mp4"
        dst = self.outputs / filename
        await asyncio.to_thread(_write_private, src, raw)
        try:
            await transcode(ffmpeg, src, dst, demuxer)
        except BaseException:
            dst.unlink(missing_ok=True)
            raise
        finally:
            src.unlink(missing_ok=True)
        job.filename, job.state, job.finished = filename, JobState.SUCCESS, time.time()
        self._minted[filename] = job.prompt_id

    def _fail(self, job: Job, message: str) -> None:
        job.state, job.error, job.finished = JobState.ERROR, message, time.time()
        log.warning("ComfyUI video job %s failed: %s", job.prompt_id, message)
