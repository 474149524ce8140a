"""`Benchmarks`: runs one benchmark at a time on this node, through the router's own runtime.

Each lane section leases its runtime with `RuntimeManager.ensure()` and sends its probe to the
lease (router/benchmarks/probes.py): the run queues, batches and swaps like any request, and
holds no lane while it is between requests. The `runtime` section unloads the model's lanes
and loads it again through the manager, timing both. Every row is written when it starts and
when it ends, and each step is published on the event bus (`benchmark_started`,
`benchmark_section`, `benchmark_finished`), so a run is visible while it goes on. Choices and
their reasons: docs/decisions.md, "Benchmarks".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from router.backend_client import BackendClient, BackendFault, fresh_connections_client
from router.benchmarks.model import (
    FAILED,
    RUN_SECTION,
    RUNNING,
    SECTION_LANES,
    SKIPPED,
    BenchmarkBusy,
    Iteration,
    Measured,
    RunRequest,
    Summary,
    run_metrics,
    run_status,
    section_metrics,
    section_status,
)
from router.benchmarks.probes import PROBES, ProbeFailed
from router.config import ModelConfig
from router.domain import Lane
from router.errors import RouterError
from router.records import EventBus
from router.runtime import RuntimeManager, primary_lane, spec_for
from router.store import Store

log = logging.getLogger(__name__)

STOPPED = "the router stopped during the run"


@dataclass
class Run:
    request: RunRequest
    config: ModelConfig
    summary: Summary  # the run as a whole (section `run`)
    deadline: float  # loop time after which no section may go on


@dataclass(eq=False)
class Benchmarks:
    """One node's benchmark runs, one at a time (built positionally by `benchmarks_service`)."""

    node_id: str
    _runtimes: RuntimeManager
    _client: BackendClient
    _events: EventBus
    _store: Store
    _current: Run | None = field(default=None, init=False)
    _task: asyncio.Task[dict[str, Any]] | None = field(default=None, init=False)

    @property
    def current(self) -> Run | None:
        return self._current

    def start(self, request: RunRequest, config: ModelConfig) -> asyncio.Task[dict[str, Any]]:
        """Begin a run now, or refuse with 409 while another runs (no await before the claim,
        so two requests can never both start)."""
        if self._current is not None:
            running = self._current.summary
            raise BenchmarkBusy(
                f"benchmark {running.run_id} of {running.model_id!r} is running on this node; "
                "retry when it has finished (benchmark_finished on /router/v1/events)"
            )
        loop = asyncio.get_running_loop()
        summary = Summary(
            uuid.uuid4().hex,
            self.node_id,
            config.id,
            request.type,
            RUN_SECTION,
            RUNNING,
            time.time(),
        )
        self._current = run = Run(request, config, summary, loop.time() + request.timeout_seconds)
        self._task = asyncio.create_task(self._run(run))
        self._task.add_done_callback(lambda _: self._clear(run))
        return self._task

    def _clear(self, run: Run) -> None:
        if self._current is run:
            self._current = None

    async def close(self) -> None:
        """Stop a run still going (router shutdown); its rows are marked failed."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._store.benchmarks.fail_unfinished(STOPPED, time.time())

    # ---- one run ----------------------------------------------------------------------

    async def _run(self, run: Run) -> dict[str, Any]:
        summary, request = run.summary, run.request
        await self._store.benchmarks.save(summary.row())
        self._publish(
            "benchmark_started",
            summary,
            type=request.type,
            sections=list(request.sections),
            iterations=request.iterations,
            timeout_seconds=request.timeout_seconds,
        )
        sections = [await self._section(run, name) for name in request.sections]
        statuses = [s.status for s in sections]
        summary.finish(run_status(statuses), time.time(), _run_error(sections))
        summary.metrics = run_metrics(statuses, summary.duration_ms or 0.0)
        await self._store.benchmarks.save(summary.row())
        self._publish("benchmark_finished", summary, True, duration_ms=summary.duration_ms)
        return {
            **summary.to_dict(),
            "node_id": self.node_id,
            "iterations": request.iterations,
            "timeout_seconds": request.timeout_seconds,
            "sections": {s.section: s.to_dict() for s in sections},
        }

    async def _section(self, run: Run, name: str) -> Summary:
        base = run.summary
        summary = Summary(
            base.run_id, self.node_id, base.model_id, base.type, name, RUNNING, time.time()
        )
        await self._store.benchmarks.save(summary.row())
        self._publish_section(summary)
        lane = SECTION_LANES.get(name)
        if lane is not None and lane not in run.config.lanes:
            summary.finish(SKIPPED, time.time(), f"model {base.model_id!r} has no {lane} component")
        elif asyncio.get_running_loop().time() >= run.deadline:
            summary.finish(FAILED, time.time(), _timed_out(run, started=False))
        else:
            await self._measure(run, summary, lane)
        await self._store.benchmarks.save(summary.row())
        self._publish_section(summary)
        return summary

    async def _measure(self, run: Run, summary: Summary, lane: Lane | None) -> None:
        iterations: list[Iteration] = []
        error: str | None = None
        try:
            async with asyncio.timeout_at(run.deadline):
                for _ in range(run.request.iterations):
                    iterations.append(await self._iteration(run.config, summary.section, lane))
        except TimeoutError:
            error = _timed_out(run, started=True)
        except Exception as exc:  # a bug must not leave the run `running` forever
            log.exception("benchmark section %s failed", summary.section)
            error = f"internal error: {exc!r}"
        summary.metrics = section_metrics(iterations)
        status = FAILED if error else section_status(iterations)
        first = next((it.error for it in iterations if it.error), None)
        summary.finish(status, time.time(), error or first)

    async def _iteration(self, config: ModelConfig, section: str, lane: Lane | None) -> Iteration:
        started = time.monotonic()
        if lane is None:
            return await self._load_once(config, started)
        try:
            lease = await self._runtimes.ensure(config, lane)
        except RouterError as exc:
            return Iteration(_since(started), error=exc.message)
        try:
            sample = await PROBES[section](self._client, lease, config)
        except (ProbeFailed, BackendFault, ValueError) as exc:
            return Iteration(_since(started), error=str(exc) or repr(exc))
        finally:
            lease.release()
        sample["queue_wait_ms"] = Measured(lease.queue_wait_ms, "ms")
        return Iteration(_since(started), sample)

    async def _load_once(self, config: ModelConfig, started: float) -> Iteration:
        """Unload whatever holds the model's lanes, then load it, through the manager."""
        try:
            lane = primary_lane(config)
            await self._runtimes.unload(spec_for(config, lane).occupies)
            unloaded = time.monotonic()
            await self._runtimes.load(config, lane)
        except RouterError as exc:  # no servable lane, or the load failed (its reason)
            return Iteration(_since(started), error=exc.message)
        load_ms = _since(unloaded)
        sample = {
            "model_load_ms": Measured(load_ms, "ms"),
            "unload_ms": Measured((unloaded - started) * 1000.0, "ms"),
            "total_start_ms": Measured(_since(started), "ms"),
        }
        return Iteration(_since(started), sample)

    def _publish(self, event: str, of: Summary, summarised: bool = False, /, **fields: Any) -> None:
        """A run's event on the bus: the node, the run and the model, then `fields`; with
        `summarised`, the status and the summary too (every event but `benchmark_started`)."""
        out = {"node_id": self.node_id, "run_id": of.run_id, "model_id": of.model_id, **fields}
        if summarised:
            out |= {"status": of.status, "summary": of.to_dict()}
        self._events.publish(event, **out)

    def _publish_section(self, summary: Summary) -> None:
        self._publish("benchmark_section", summary, True, section=summary.section)


def _since(started: float) -> float:
    return (time.monotonic() - started) * 1000.0


def _timed_out(run: Run, *, started: bool) -> str:
    limit = f"{run.request.timeout_seconds:g}s (timeout_seconds)"
    return f"timed out after {limit}" if started else f"not started: the run passed {limit}"


def _run_error(sections: list[Summary]) -> str | None:
    failed = [s.section for s in sections if s.status == FAILED]
    return f"failed sections: {', '.join(failed)}" if failed else None


@contextlib.asynccontextmanager
async def benchmarks_service(
    node_id: str, runtimes: RuntimeManager, events: EventBus, store: Store
) -> AsyncIterator[Benchmarks]:
    """The service for the app's lifetime; rows a crashed router left `running` are failed.

    Probes use a backend client of their own that opens a connection per request: a pooled
    keep-alive connection llama-server had closed after a streamed answer failed the next
    iteration (real tier), and a fresh loopback connection costs well under a millisecond.
    """
    await store.benchmarks.fail_unfinished(STOPPED, time.time())
    async with fresh_connections_client() as client:
        service = Benchmarks(node_id, runtimes, client, events, store)
        try:
            yield service
        finally:
            await service.close()
