"""`Downloads`: the node's download service. Plans, starts, pauses, resumes and cancels jobs;
runs each job's transfer in a worker thread (at most `downloads.max_concurrent` at once);
keeps jobs and the library in the store, so a restart resumes what was running.

Staging is `<downloads.dir>/.staging/<job id>/<n>.part` (the same filesystem as the library,
so the final rename is atomic); a file reaches `<downloads.dir>/<owner>/<name>/<path>` only
after its hash was checked. A job that fails or is cancelled removes its staging folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from router.config import DownloadsSection
from router.downloads.hub import REGISTRY, Hub, resolve
from router.downloads.jobs import RESUMABLE, TERMINAL, Job, State
from router.downloads.library import STAGING, listing, scan
from router.downloads.plan import Plan, Present, RepoFile, Repository, choose, make_plan
from router.downloads.ssrf import Policy, origin_of
from router.downloads.transfer import (
    Stopped,
    TransferError,
    fetch,
    new_client,
    promote,
    remove_tree,
)
from router.errors import Conflict, NotFound
from router.store import Store

log = logging.getLogger(__name__)

GiB = 1024**3
PROGRESS_INTERVAL = 0.5
SHUTDOWN_WAIT = 10.0


class Downloads:
    def __init__(
        self, settings: DownloadsSection, folder: Path, store: Store, node_id: str
    ) -> None:
        self.settings = settings
        self.dir = folder
        self.store = store
        self.node_id = node_id
        self.hub = Hub(settings.endpoint, settings.token)
        self.jobs: dict[str, Job] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(settings.max_concurrent)
        self._policy_key: int | None = None
        # model-assets jobs (router/api/site/asset_jobs.py): kept here, in memory, with
        # their background tasks so a stop can wait for them.
        self.asset_jobs: dict[str, dict[str, Any]] = {}
        self.background: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def reserve_bytes(self) -> int:
        return int(self.settings.free_space_reserve_gb * GiB)

    async def start(self) -> None:
        origin = origin_of(self.settings.endpoint)
        try:  # a slow resolver must not hold up the start: then only public addresses open
            addresses = await asyncio.wait_for(
                asyncio.to_thread(resolve, origin.host, origin.port), 5.0
            )
        except TimeoutError:
            addresses = []
        policy = Policy.for_endpoint(self.settings.endpoint, addresses)
        self._policy_key = REGISTRY.add(policy)
        log.info(
            "downloader status enabled=true endpoint=%s token=%s opens=%s",
            self.settings.endpoint,
            self.hub.has_token,
            ",".join(sorted(policy.allowed)) or "public",
        )
        await asyncio.to_thread(self.dir.mkdir, parents=True, exist_ok=True)
        for row in reversed(await self.store.downloads.jobs()):
            job = Job.from_row(row)
            self.jobs[job.id] = job
            # Events are not stored: the first one of a loaded job is its state, so a stream
            # opened on a finished job ends at once.
            job.publish("state", restored=True, **job.progress(time.monotonic()))
            if job.state in (State.RUNNING, State.QUEUED):
                self._requeue(job, "resumed after a router restart")

    async def close(self) -> None:
        """Stop the transfers; their jobs stay `running`/`queued` in the store and resume at
        the next start (their staged bytes are kept)."""
        self._closing = True
        for extra in list(self.background):
            extra.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        for job in self.jobs.values():
            if job.state is State.RUNNING:
                job.control.request("shutdown")
        tasks = list(self._tasks.values())
        if tasks:
            # A worker notices between two chunks; one stuck in a read is abandoned.
            _, stuck = await asyncio.wait(tasks, timeout=SHUTDOWN_WAIT)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
        if self._policy_key is not None:
            REGISTRY.remove(self._policy_key)

    # -- planning ----------------------------------------------------------------------

    async def repository(self, repo_id: str, revision: str | None) -> Repository:
        return await asyncio.to_thread(self.hub.repository, repo_id, revision)

    async def plan(self, repo_id: str, revision: str | None, wanted: list[Any], mode: str) -> Plan:
        repo = await self.repository(repo_id, revision)
        chosen = choose(repo, wanted, mode)
        access = await asyncio.to_thread(self.hub.access, repo, chosen[0].path if chosen else None)
        present = await self._present(repo, chosen)
        free = (await asyncio.to_thread(shutil.disk_usage, self.dir)).free
        return make_plan(repo, revision, chosen, present, free, self.reserve_bytes, access)

    async def _present(self, repo: Repository, chosen: tuple[RepoFile, ...]) -> dict[str, Present]:
        known = {row["path"]: row for row in await self.store.downloads.library_entries()}
        present: dict[str, Present] = {}
        for f in chosen:
            target = self.target(repo.id, f.path)
            if target.is_file():
                row = known.get(self.relative(repo.id, f.path))
                size = target.stat().st_size
                if row is not None and row["size"] == size:
                    present[f.path] = Present(size, row["sha256"], row["commit_sha"])
                else:
                    present[f.path] = Present(size)
        return present

    def target(self, repo_id: str, path: str) -> Path:
        return self.dir / repo_id / path

    def relative(self, repo_id: str, path: str) -> str:
        return f"{repo_id}/{path}"

    # -- jobs ----------------------------------------------------------------------------

    async def start_job(self, plan: Plan, *, confirm_replace: bool, confirm_unsafe: bool) -> Job:
        blockers = plan.blockers(confirm_replace=confirm_replace, confirm_unsafe=confirm_unsafe)
        if blockers:
            raise Conflict("; ".join(blockers), code="download_refused")
        if not plan.files:
            raise Conflict("every chosen file is already in the library", code="nothing_to_do")
        busy = self._busy_targets() & {
            self.relative(plan.repository.id, f.path) for f in plan.files
        }
        if busy:
            raise Conflict(f"another job is downloading {sorted(busy)[0]!r}", code="download_busy")
        job = Job(
            uuid.uuid4().hex,
            self.node_id,
            plan.repository.id,
            plan.revision,
            plan.repository.commit,
            plan.files,
        )
        self.jobs[job.id] = job
        job.publish("state", **job.progress(time.monotonic()))
        await self.store.downloads.save_job(job.to_row())
        self._spawn(job)
        return job

    def _busy_targets(self) -> set[str]:
        return {
            self.relative(job.repository, f.path)
            for job in self.jobs.values()
            if job.state not in TERMINAL
            for f in job.files
            if f.path not in job.done_paths
        }

    def get(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"no download job {job_id[:64]!r}", param="id")
        return job

    async def pause(self, job_id: str) -> Job:
        job = self.get(job_id)
        if job.state is State.QUEUED:
            await self._save(job, State.PAUSED)
        elif job.state is State.RUNNING:
            job.control.request("pause")
            await self._settled(job)
        elif job.state is not State.PAUSED:
            raise Conflict(f"a {job.state.value} job cannot be paused", code="job_state")
        return job

    async def resume(self, job_id: str) -> Job:
        job = self.get(job_id)
        if job.state in (State.QUEUED, State.RUNNING):
            return job
        if job.state not in RESUMABLE:
            raise Conflict(f"a {job.state.value} job cannot be resumed", code="job_state")
        self._requeue(job, "resumed")
        await self.store.downloads.save_job(job.to_row())
        return job

    async def cancel(self, job_id: str) -> Job:
        job = self.get(job_id)
        if job.state in TERMINAL:
            raise Conflict(f"the job is already {job.state.value}", code="job_state")
        if job.state is State.RUNNING:
            job.control.request("cancel")
            await self._settled(job)
        else:
            await asyncio.to_thread(remove_tree, self._staging(job))
            await self._save(job, State.CANCELLED)
        return job

    async def _settled(self, job: Job) -> None:
        task = self._tasks.get(job.id)
        if task is not None:
            await asyncio.shield(asyncio.wait({task}))

    def _requeue(self, job: Job, why: str) -> None:
        job.control = type(job.control)()
        job.error = None
        job.move(State.QUEUED)
        job.publish("resumed", reason=why)
        self._spawn(job)

    def _spawn(self, job: Job) -> None:
        running = self._tasks.get(job.id)
        if running is not None and not running.done():
            return  # its loop sees the job queued again and runs it
        task = asyncio.create_task(self._run(job), name=f"download-{job.id}")
        self._tasks[job.id] = task
        task.add_done_callback(lambda _t: self._tasks.pop(job.id, None))

    async def _save(self, job: Job, state: State, error: str | None = None) -> None:
        job.move(state, error)
        await self.store.downloads.save_job(job.to_row())

    def _staging(self, job: Job) -> Path:
        return self.dir / STAGING / job.id

    # -- the runner --------------------------------------------------------------------

    async def _run(self, job: Job) -> None:
        # A loop: a job resumed while its last run was still ending runs again here (one task
        # per job, never two transfers into the same part file).
        while job.state is State.QUEUED and not self._closing:
            async with self._slots:
                if job.state is not State.QUEUED or self._closing:
                    return
                await self._run_once(job)

    async def _run_once(self, job: Job) -> None:
        await self._save(job, State.RUNNING)
        ticker = asyncio.create_task(self._tick(job))
        try:
            outcome, error = await self._transfer_all(job)
        finally:
            ticker.cancel()
        if outcome is State.RUNNING:
            return  # the router is stopping: the next start resumes the job
        if outcome in (State.FAILED, State.CANCELLED):
            await asyncio.to_thread(remove_tree, self._staging(job))
        await self._save(job, outcome, error)

    async def _transfer_all(self, job: Job) -> tuple[State, str | None]:
        staging = self._staging(job)
        await asyncio.to_thread(staging.mkdir, parents=True, exist_ok=True, mode=0o700)
        client = new_client()
        try:
            for index, item in enumerate(job.files):
                if job.control.stop.is_set():
                    raise Stopped(job.control.reason)
                if item.path in job.done_paths:
                    continue
                await self._transfer_one(job, client, index, item, staging / f"{index}.part")
        except Stopped as stop:
            reason = str(stop)
            return {"pause": State.PAUSED, "cancel": State.CANCELLED}.get(
                reason, State.RUNNING
            ), None
        except (TransferError, OSError) as exc:
            log.warning("download %s failed: %s", job.id, exc)
            return State.FAILED, str(exc)
        except Exception as exc:  # a job is never left `running` by a bug or a store error
            log.exception("download %s failed unexpectedly", job.id)
            return State.FAILED, f"internal error: {type(exc).__name__}"
        finally:
            client.close()
        return State.COMPLETED, None

    async def _transfer_one(
        self, job: Job, client: Any, index: int, item: RepoFile, part: Path
    ) -> None:
        job.current, job.file_done = index, 0
        url = self.hub.file_url(job.repository, job.commit, item.path)

        def progress(done: int) -> None:
            job.file_done = done

        digest = await asyncio.to_thread(
            fetch,
            client,
            url,
            origin_of(self.settings.endpoint),
            self.hub.auth_headers(),
            item,
            part,
            job.control,
            progress,
        )
        await asyncio.to_thread(promote, part, self.target(job.repository, item.path), self.dir)
        job.done_paths.add(item.path)
        job.current = None
        await self.store.downloads.save_library_entry(
            {
                "path": self.relative(job.repository, item.path),
                "repository": job.repository,
                "commit_sha": job.commit,
                "repo_path": item.path,
                "size": item.size or 0,
                "sha256": digest,
                "verified_by": item.verify,
                "job_id": job.id,
                "downloaded_at": time.time(),
            }
        )
        job.publish("file", path=item.path, sha256=digest, verified_by=item.verify)
        await self.store.downloads.save_job(job.to_row())

    async def _tick(self, job: Job) -> None:
        last = -1
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL)
            now = time.monotonic()
            if job.bytes_done != last or job.rate(now) > 0:
                last = job.bytes_done
                job.publish("progress", **job.progress(now))

    # -- the library -------------------------------------------------------------------

    async def library(self) -> dict[str, Any]:
        rows = await self.store.downloads.library_entries()
        return listing(rows, self.dir, self.jobs.values())

    async def rescan(self) -> dict[str, Any]:
        """Drop library rows whose file is gone; report files that changed size and files in
        downloads.dir the library does not know (router/downloads/library.py)."""
        rows = await self.store.downloads.library_entries()
        missing, changed, untracked = await asyncio.to_thread(scan, self.dir, rows)
        for path in missing:
            await self.store.downloads.delete_library_entry(path)
        return {
            "checked": len(rows),
            "missing": missing,
            "changed": changed,
            "untracked": untracked,
        }


@contextlib.asynccontextmanager
async def downloads_service(settings: DownloadsSection, folder: Path, store: Store, node_id: str):  # type: ignore[no-untyped-def]
    service = Downloads(settings, folder, store, node_id)
    await service.start()
    try:
        yield service
    finally:
        await service.close()
