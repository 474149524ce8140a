"""`model-assets/jobs` (start) and `model-assets/jobs/{id}` (status): resolve a portable
configuration in the background, downloading from Hugging Face what this node lacks.

Order per field: this node's files (hash index, `models.file_roots`), the config's pinned
`<field>_hf`, the origin learned by `bind`, a unique exact candidate on the hub. A hub file is
taken only when its commit resolves and its LFS SHA-256 equals the field's hash; the download
itself is an ordinary download job (docs/downloads.md), verified before it lands. Asset jobs
are kept in memory (their download jobs are in the store and survive a restart).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from router.api.site.downloads import downloads_of
from router.appkeys import SITE_FILES, STORE
from router.downloads import Downloads, State, UnsafeName
from router.downloads.assets import hf_uri, pinned_origin
from router.edge import addressed_node
from router.errors import NotFound, RouterError
from router.site import SiteFiles

Document = Callable[[web.Request, Mapping[str, Any]], Awaitable[tuple[str, dict[str, Any]]]]
ResolveDoc = Callable[[SiteFiles, Mapping[str, Any]], Awaitable[list[dict[str, Any]]]]
MAX_ASSET_JOBS = 100
log = logging.getLogger(__name__)


async def start(
    request: web.Request, body: dict[str, Any], document: Document, resolve_doc: ResolveDoc
) -> web.Response:
    node_id = addressed_node(request)
    service = downloads_of(request)
    name, doc = await document(request, body)
    results = await resolve_doc(request.app[SITE_FILES], doc)  # a malformed document is a 400 now
    for result in results:
        result["state"] = "resolved" if result["resolved"] else "pending"
    job: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "node_id": node_id,
        "filename": name,
        "state": "running",
        "created_at": time.time(),
        "fields": results,
    }
    jobs = service.asset_jobs
    while len(jobs) >= MAX_ASSET_JOBS:
        jobs.pop(next(iter(jobs)))
    jobs[job["id"]] = job
    task = asyncio.create_task(_fill(request.app, service, doc, job))
    service.background.add(task)
    task.add_done_callback(service.background.discard)
    return web.json_response(_view(service, job), status=202)


async def _fill(
    app: web.Application, service: Downloads, doc: dict[str, Any], job: dict[str, Any]
) -> None:
    for result in job["fields"]:
        if result["resolved"]:
            continue
        try:
            await _from_hub(app, service, doc, result)
        except RouterError as err:
            result.update(state="failed", failure=err.message)
        except UnsafeName as exc:  # the origin names no file of its repository
            result.update(state="failed", failure=str(exc))
        except Exception as exc:  # never a job left running by a bug
            log.exception("model-assets job %s", job["id"])
            result.update(state="failed", failure=f"internal error: {type(exc).__name__}")
    job["state"] = "done"


async def _from_hub(
    app: web.Application, service: Downloads, doc: dict[str, Any], result: dict[str, Any]
) -> None:
    sha = result["hash"]
    origin, source = pinned_origin(doc, result["field"], result["position"]), "pinned"
    if origin is None:
        learned = await app[STORE].downloads.asset_origin(sha)
        origin = (
            (learned["repository"], learned["commit_sha"], learned["repo_path"])
            if learned
            else None
        )
        source = "learned"
    if origin is None:
        found = await asyncio.to_thread(service.hub.candidates, sha, result["filename"])
        if len(found) != 1:
            result.update(state="failed", failure=f"{len(found)} hub candidates; bind one first")
            return
        origin, source = (found[0]["repository"], found[0]["commit"], found[0]["path"]), "candidate"
    repository, commit, path = origin
    plan = await service.plan(repository, commit, [path], "explicit")
    listed = next((f for f in plan.repository.files if f.path == path), None)
    if plan.repository.commit != commit or listed is None or listed.sha256 != sha:
        result.update(
            state="failed", failure=f"{hf_uri(*origin)} is not a file with this LFS SHA-256"
        )
        return
    result.update(source=f"hf:{source}", hf=hf_uri(*origin))
    if plan.skipped:  # already in the library with this hash
        result.update(state="resolved", resolved=True, path=str(service.target(repository, path)))
        return
    download = await service.start_job(plan, confirm_replace=False, confirm_unsafe=False)
    result.update(state="downloading", download_job=download.id)


def _view(service: Downloads, job: dict[str, Any]) -> dict[str, Any]:
    """The job with each downloading field brought up to date from its download job."""
    for result in job["fields"]:
        download = service.jobs.get(result.get("download_job") or "")
        if download is None or result.get("state") != "downloading":
            continue
        if download.state is State.COMPLETED:
            path = service.target(download.repository, download.files[0].path)
            result.update(state="resolved", resolved=True, path=str(path))
        elif download.state in (State.FAILED, State.CANCELLED):
            result.update(state="failed", failure=download.error or download.state.value)
    pending = any(r.get("state") == "downloading" for r in job["fields"])
    resolved = all(r["resolved"] for r in job["fields"])
    state = (
        "running"
        if job["state"] == "running" or pending
        else ("resolved" if resolved else "failed")
    )
    return {**job, "state": state, "resolved": resolved}


async def status(request: web.Request, job_id: str) -> web.Response:
    addressed_node(request)
    service = downloads_of(request)
    job = service.asset_jobs.get(job_id)
    if job is None:
        raise NotFound(f"no model-assets job {job_id[:64]!r}", param="id")
    return web.json_response(_view(service, job))
