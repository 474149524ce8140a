"""Ollama's liveness probe and model management: `GET /`, `/api/pull` (Hugging Face GGUFs
through the downloads service, docs/ollama.md "Pull"), and `/api/push`, `/api/copy`,
`/api/create`, `/api/delete`, which answer in Ollama's shape what the router does instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from router.appkeys import CATALOG, DOWNLOADS, SETTINGS
from router.config.files import write_atomic
from router.downloads import Downloads, Job, State, UnsafeName
from router.downloads.plan import RepoFile
from router.edge import Handler, read_json
from router.errors import BadRequest, Conflict, RouterError, ServiceUnavailable
from router.ollama import canonical_name
from router.ollama import pull as pl

NDJSON = "application/x-ndjson"
PROGRESS_EVERY_S = 1.0  # a record at least this often while bytes move (or not)
_ENDS = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED, State.PAUSED})


async def root(request: web.Request) -> web.StreamResponse:
    """Ollama's own answer to `GET /` and `HEAD /` (the `ollama` CLI's heartbeat)."""
    return web.Response(text="Ollama is running", content_type="text/plain")


async def manage(request: web.Request) -> web.StreamResponse:
    """push, copy, create, delete: the router serves .kcpps configurations from its config
    folder, so these are refused with what to do instead (400, Ollama's `{"error"}`: the
    request is one this server does not take; no 5xx, which would say the router failed)."""
    op = request.path.rstrip("/").rsplit("/", 1)[-1]
    await read_json(request, types=None)  # a malformed body is still a 400
    instead = {
        "push": "the router does not publish models",
        "copy": "to serve a model under another name, copy its .kcpps file in the config folder",
        "create": "write a .kcpps configuration (or use the WebUI's Models page) instead of a Modelfile",
        "delete": "remove the model's .kcpps configuration (WebUI or /router/v1/site/config-file)",
    }[op]
    raise BadRequest(f"/api/{op} is not supported by tensor-router: {instead}")


async def pull(request: web.Request) -> web.StreamResponse:
    body = await read_json(request, required=True, types=None)
    wanted = body.get("model") or body.get("name")
    stream = body.get("stream", True)
    if not isinstance(stream, bool | None):
        raise BadRequest("stream must be a boolean", param="stream")
    catalog = request.app[CATALOG]
    if isinstance(wanted, str) and catalog.resolve(canonical_name(wanted)) is not None:
        # Ollama answers success for a model it already has; so does the router for one it
        # serves (a config ID or alias), whatever backend serves it.
        return await _answer(request, _listed(pl.already_served()), stream)
    name = pl.parse_pull_name(wanted)
    service = request.app.get(DOWNLOADS)
    if service is None:
        raise ServiceUnavailable("pulling needs the downloads service (downloads.enabled: true)")
    repo = await service.repository(name.repo_id, None)
    files = pl.choose_files(repo.files, name)
    # Planned and started before the first record, so a refusal keeps its status (a 409
    # names the blocker: no space, no access, another job on the file).
    try:
        plan = await service.plan(name.repo_id, None, [f.path for f in files], "explicit")
    except UnsafeName as exc:
        raise BadRequest(str(exc), param="model") from None
    job = None
    if plan.files:
        job = await service.start_job(plan, confirm_replace=False, confirm_unsafe=False)
    return await _answer(request, _pull(request, service, name, files, job), stream)


async def _answer(
    request: web.Request, records: AsyncIterator[dict[str, Any]], stream: bool | None
) -> web.StreamResponse:
    """The progress records as Ollama sends them: NDJSON lines, or the last one alone."""
    if stream is False:
        return await _whole(records)
    response: web.StreamResponse | None = None
    try:
        async for record in records:
            if response is None:
                response = web.StreamResponse(headers={"Content-Type": NDJSON})
                await response.prepare(request)
            await response.write(json.dumps(record).encode() + b"\n")
    except RouterError as exc:
        if response is None:
            raise
        # Started: Ollama's mid-stream error is one more record, status kept.
        await response.write(json.dumps({"error": exc.message}).encode() + b"\n")
    assert response is not None  # every record source yields
    await response.write_eof()
    return response


async def _listed(records: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for record in records:
        yield record


async def _whole(records: AsyncIterator[dict[str, Any]]) -> web.StreamResponse:
    last: dict[str, Any] = {}
    async for record in records:
        last = record
    return web.json_response(last)


async def _pull(
    request: web.Request,
    service: Downloads,
    name: pl.PullName,
    files: tuple[RepoFile, ...],
    job: Job | None,
) -> AsyncIterator[dict[str, Any]]:
    yield pl.status("pulling manifest")
    if job is not None:
        async for record in _follow(job):
            yield record
    else:
        for item in files:  # already in the library
            yield pl.file_progress(item, item.size or 0)
    yield pl.status("verifying sha256 digest")
    model = service.target(name.repo_id, pl.first_part(files).path)
    yield pl.status("writing manifest")
    config_id = await _write_config(request, name.config_id, str(model.resolve()))
    yield pl.status(f"configuration {config_id} written")
    yield pl.status("success")


async def _follow(job: Job) -> AsyncIterator[dict[str, Any]]:
    seen: dict[str, int] = {}
    while True:
        changed = job.changed
        for record in pl.job_records(job, seen):
            yield record
        if job.state in _ENDS:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), PROGRESS_EVERY_S)
    if job.state is not State.COMPLETED:
        raise BadRequest(f"the download of {job.repository} {job.state.value}: {job.error or ''}")


async def _write_config(request: web.Request, config_id: str, model_path: str) -> str:
    """A .kcpps for the pulled file in the config folder (an existing one for the same file is
    kept; another one of that name is never overwritten), then a catalog refresh."""
    folder = request.app[SETTINGS].models.config_dir
    path = folder / f"{config_id}.kcpps"
    data = json.dumps(pl.kcpps(model_path), indent=4).encode() + b"\n"

    def write() -> None:
        if path.exists():
            try:
                same = json.loads(path.read_bytes()).get("model_param") == model_path
            except (OSError, ValueError, AttributeError):
                same = False
            if not same:
                raise Conflict(f"{path.name} exists for another file; rename or remove it first")
            return
        write_atomic(path, data, make_parent=True)

    await asyncio.to_thread(write)
    await request.app[CATALOG].refresh()
    return config_id


HANDLERS: dict[str, Handler] = {
    "ollama.root": root,
    "ollama.manage": manage,
    "ollama.pull": pull,
}
