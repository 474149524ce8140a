"""`BackendSetup`: runs backend init jobs, one at a time per backend.

A job builds into a fresh prefix (backends/installs.py), step by step as the recipe says,
then runs the recipe's probe against the new build and only then swaps it in. Until that
swap nothing the loader reads has changed, so the old build keeps serving; a failure or a
cancel deletes the new prefix and leaves the old build as it was. The claim on a backend is
taken with no await between the check and the start (two inits can never both start), and
the build lock (flock) keeps a `make backends` on the same machine out at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.installs import Busy, Layout, discard, old_builds, promote
from backends.recipes import BuildContext, Recipe, ResolvedStep
from router.config.schema import SetupSection
from router.errors import BadRequest, Conflict
from router.records import EventBus
from router.setup import persist
from router.setup.job import Chunk, JobState, SetupJob
from router.setup.runner import OutputSink, StepFailed, run_step

log = logging.getLogger(__name__)
MiB = 1024 * 1024
JOBS_IN_MEMORY = 4
Outcome = tuple[JobState, str | None, bool]  # state, error, retryable


class BackendSetup:
    def __init__(
        self,
        recipes: Mapping[str, Recipe],
        *,
        root: Path,
        jobs_dir: Path,
        section: SetupSection,
        node_id: str,
        events: EventBus,
        python: str = sys.executable,
    ) -> None:
        self.recipes = dict(recipes)
        self.root = root
        self._jobs_dir = jobs_dir
        self._section = section
        self._node_id = node_id
        self._events = events
        self._python = python
        self._running: dict[str, SetupJob] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._jobs: dict[str, SetupJob] = {}  # this process's jobs, by id
        self._last: dict[str, dict[str, Any]] = persist.latest_records(jobs_dir)

    def recipe(self, backend_id: Any) -> Recipe:
        if not isinstance(backend_id, str) or not backend_id:
            raise BadRequest("backend_id must be a non-empty string", param="backend_id")
        recipe = self.recipes.get(backend_id)
        if recipe is None:
            known = ", ".join(sorted(self.recipes))
            raise BadRequest(
                f"no recipe for backend {backend_id[:64]!r} (known: {known})", param="backend_id"
            )
        return recipe

    def layout(self, recipe: Recipe) -> Layout:
        return Layout(self.root, recipe.backend_id)

    # -- starting and cancelling ----------------------------------------------------------

    def start(self, backend_id: Any) -> SetupJob:
        recipe = self.recipe(backend_id)
        running = self._running.get(recipe.backend_id)
        if running is not None:
            raise Conflict(
                f"an init of {recipe.backend_id} is running (job {running.id}); cancel it or"
                " wait for backend_init state succeeded, failed or cancelled",
                param="backend_id",
            )
        lock = contextlib.ExitStack()
        try:
            lock.enter_context(self.layout(recipe).lock(wait=False))
        except Busy:
            raise Conflict(
                f"{recipe.backend_id} is being built by another process on this node"
                " (make backends?)",
                param="backend_id",
            ) from None
        except OSError as exc:
            raise Conflict(
                f"cannot take the build lock under TENSOR_ROUTER_BACKENDS_DIR: {exc.strerror}",
                param="backend_id",
            ) from None
        job = SetupJob(
            uuid.uuid4().hex,
            self._node_id,
            recipe.backend_id,
            recipe.version,
            [s.name for s in recipe.steps],
            int(self._section.max_output_mb * MiB),
        )
        self._running[recipe.backend_id] = self._jobs[job.id] = job
        self._publish(job.advance("preparing"))
        task = asyncio.create_task(self._run(job, recipe, lock), name=f"init-{recipe.backend_id}")
        self._tasks[job.id] = task
        return job

    async def cancel(self, backend_id: Any) -> SetupJob:
        recipe = self.recipe(backend_id)
        job = self._running.get(recipe.backend_id)
        if job is None:
            raise Conflict(f"no init of {recipe.backend_id} is running", param="backend_id")
        task = self._tasks[job.id]
        task.cancel()
        await asyncio.wait({task})  # the step's group is stopped and the prefix deleted
        return job

    async def close(self) -> None:
        """The router stops: running jobs are cancelled (their builds discarded)."""
        tasks = list(self._tasks.values())
        for job_id, task in self._tasks.items():
            if not self._jobs[job_id].done:  # a finished job is only saving its record
                task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- reading ----------------------------------------------------------------------------

    def job(self, job_id: str) -> SetupJob | None:
        return self._jobs.get(job_id)

    def stored_job(self, job_id: str) -> dict[str, Any] | None:
        return persist.load_record(self._jobs_dir, job_id)

    def stored_chunks(self, job_id: str) -> list[Chunk]:
        return persist.load_chunks(self._jobs_dir, job_id)

    def running(self, backend_id: str) -> SetupJob | None:
        return self._running.get(backend_id)

    def last_record(self, backend_id: str) -> dict[str, Any] | None:
        job = self._running.get(backend_id)
        return job.record() if job is not None else self._last.get(backend_id)

    # -- the job ----------------------------------------------------------------------------

    def _publish(self, event: dict[str, Any]) -> None:
        fields = {k: v for k, v in event.items() if k not in ("event", "time")}
        self._events.publish("backend_init", **fields)

    async def _run(self, job: SetupJob, recipe: Recipe, lock: contextlib.ExitStack) -> None:
        layout = self.layout(recipe)
        made: list[Path] = []  # the new prefix and scratch folder, once created
        outcome: Outcome = (JobState.FAILED, "internal error", True)
        try:
            outcome = await self._build(job, recipe, layout, made)
        except asyncio.CancelledError:
            outcome = (JobState.CANCELLED, "cancelled", True)
        except StepFailed as exc:
            outcome = (JobState.FAILED, str(exc), True)
        except OSError as exc:  # the build folders (disk full, permissions)
            outcome = (JobState.FAILED, f"cannot write the build: {exc.strerror or exc}", True)
        except Exception as exc:
            log.exception("init of %s failed", recipe.backend_id)
            outcome = (JobState.FAILED, f"internal error: {exc}", True)
        finally:
            await self._settle(job, layout, made, outcome, lock)

    async def _build(
        self, job: SetupJob, recipe: Recipe, layout: Layout, made: list[Path]
    ) -> Outcome:
        missing = recipe.missing_tools()
        if missing:
            raise StepFailed(f"{recipe.backend_id} needs {', '.join(missing)} on PATH")
        prefix, work = layout.new_build()
        made += [prefix, work]
        layout.cache.mkdir(parents=True, exist_ok=True)
        ctx = BuildContext(prefix, work, layout.cache, self._python, self._section.build_jobs)
        for index, step in enumerate(recipe.steps, start=1):
            self._publish(job.advance(step.name, index))
            await self._step(step.resolve(ctx), job.output, self._section.step_timeout)
        self._publish(job.advance("probing"))
        await self._probe(job, recipe, prefix)
        self._publish(job.advance("swapping"))
        record = {
            "backend_id": recipe.backend_id,
            "version": recipe.version,
            "built_at": time.time(),
            "built_by": "router",
            "job_id": job.id,
            "probe_output": job.probe_output,
        }
        promote(layout, prefix, recipe, record)  # the swap; no await between it and the return
        return (JobState.SUCCEEDED, None, False)

    async def _settle(
        self,
        job: SetupJob,
        layout: Layout,
        made: list[Path],
        outcome: Outcome,
        lock: contextlib.ExitStack,
    ) -> None:
        """Discard what the build leaves behind, release the claim, then announce the end
        (so a client that sees it may start the next init at once) and keep the record."""
        succeeded = outcome[0] is JobState.SUCCEEDED
        doomed = made[1:] + old_builds(layout) if succeeded else made
        try:
            await asyncio.shield(asyncio.to_thread(discard, *doomed))
        except asyncio.CancelledError:
            pass  # the deletion goes on in its thread; the claim is released below
        finally:
            lock.close()
            self._running.pop(job.backend_id, None)
        state, error, retryable = outcome
        self._publish(job.finish(state, error, retryable=retryable))
        record = self._last[job.backend_id] = job.record()
        try:
            await asyncio.shield(
                asyncio.to_thread(
                    persist.save_job, self._jobs_dir, record, job.chunks, self._section.keep_jobs
                )
            )
        except (OSError, asyncio.CancelledError) as exc:
            log.warning("init job %s: its record was not saved: %r", job.id, exc)
        finally:
            self._tasks.pop(job.id, None)
            self._forget_old_jobs()

    def _forget_old_jobs(self) -> None:
        """Finished jobs beyond the newest few are read back from disk (their output is big)."""
        done = [job_id for job_id, job in self._jobs.items() if job.done]
        for job_id in done[:-JOBS_IN_MEMORY]:
            del self._jobs[job_id]

    async def _step(self, step: ResolvedStep, sink: OutputSink, seconds: float) -> None:
        await run_step(step, sink, seconds=seconds, grace=self._section.cancel_grace)

    async def _probe(self, job: SetupJob, recipe: Recipe, prefix: Path) -> None:
        binary = recipe.binary_in(prefix)
        if not binary.exists():
            raise StepFailed(f"the build finished but produced no {recipe.binary}")
        seen: list[bytes] = []

        def sink(stream: str, data: bytes) -> None:
            seen.append(data)
            job.output(stream, data)

        probe = ResolvedStep("probe", recipe.probe_argv(binary), {}, None)
        try:
            await self._step(probe, sink, self._section.probe_timeout)
        except StepFailed as exc:
            raise StepFailed(f"the new build fails its version probe: {exc}") from None
        text = b"".join(seen).decode("utf-8", "replace").strip()
        job.probe_output = text.splitlines()[0][:200] if text else None
        for path, argv in recipe.companion_probes(prefix):  # llama.cpp's RPC server
            if not path.exists():
                raise StepFailed(f"the build finished but produced no {path.name}")
            try:
                companion = ResolvedStep("probe", argv, {}, None)
                await self._step(companion, job.output, self._section.probe_timeout)
            except StepFailed as exc:
                raise StepFailed(f"the new build's {path.name} fails its probe: {exc}") from None
