"""Read-ahead: while a lane drains for a swap, read the incoming model's files into the page
cache, so the backend's own load finds them in memory (issue 26, "Overlap the swap").

The runtime manager calls `ReadAhead.start()` (through `Loader.read_ahead`) when it decides a
lane must drain because another model waits; the loader calls `loading()` when a load begins,
which stops the reading and freezes what it achieved for that load's capture. Reading happens
in chunks, each in a worker thread (never on the event loop); between chunks the job checks,
on the loop, that the swap is still wanted, so a swap abandoned by its waiters cancels it.

Nothing here may delay or fail a request: every failure is logged, published as a `readahead`
event (docs/events.md) and counted (`tensor_router_readahead_total`), and the load goes on.
The amount read is capped by `plan()` (pure) to the host room the memory package grants
(router/memory/host.py: the ledger's host budget, `memory.reserve`, the memory available now).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from router.config import Settings
from router.config.availability import needed_files
from router.memory.host import HostRoom
from router.runtime.loader import LaunchSpec

log = logging.getLogger(__name__)
Publish = Callable[..., Any]

CHUNK = 8 << 20  # bytes per read: large enough to stream, small enough to stop soon
# The main model of each lane first: it is the bulk of the load, and what a capped plan keeps.
_FIRST = ("model_param", "sdmodel", "whispermodel", "embeddingsmodel")


# ---- pure decisions -------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What to read: (file, bytes from its start) in order; `total` the files' whole size."""

    reads: tuple[tuple[Path, int], ...]
    total: int
    room: int

    @property
    def planned(self) -> int:
        return sum(n for _, n in self.reads)

    @property
    def capped(self) -> bool:
        return self.planned < self.total


def order_files(files: dict[str, tuple[Path, int]]) -> list[tuple[Path, int]]:
    """Main models first, then the rest by component key; a file named twice once."""
    keys = sorted(files, key=lambda k: (k not in _FIRST, _FIRST.index(k) if k in _FIRST else 0, k))
    seen: set[Path] = set()
    out: list[tuple[Path, int]] = []
    for key in keys:
        path, size = files[key]
        if path not in seen and size > 0:
            seen.add(path)
            out.append((path, size))
    return out


def plan(files: Sequence[tuple[Path, int]], room: int) -> Plan:
    """Read the files in order until `room` bytes; the last one read only in part.

    Reading more than fits would evict the first pages read (or the outgoing runtime's) from
    the page cache before the load gets to them, so a plan never exceeds `room`."""
    total = sum(size for _, size in files)
    left = max(0, room)
    reads: list[tuple[Path, int]] = []
    for path, size in files:
        if left <= 0:
            break
        take = min(size, left)
        reads.append((path, take))
        left -= take
    return Plan(tuple(reads), total, max(0, room))


# ---- one read-ahead -----------------------------------------------------------------------


@dataclass
class Job:
    key: str
    model: str
    plan: Plan
    wanted: Callable[[], bool]
    started: float = field(default_factory=time.monotonic)
    bytes: int = 0
    seconds: float = 0.0
    result: str = "reading"  # then done, cancelled, stopped (the load began), failed
    stop: str | None = None  # why to stop after the current chunk

    def figures(self) -> dict[str, Any]:
        """What a load capture records (`readahead`), docs/swaps.md."""
        reading = self.result == "reading"
        seconds = time.monotonic() - self.started if reading else self.seconds
        return {
            "bytes": self.bytes,
            "seconds": round(seconds, 3),
            "done": self.result == "done",
            "result": (self.stop or "reading") if reading else self.result,
            "planned": self.plan.planned,
            "total": self.plan.total,
            "capped": self.plan.capped,
        }


def read_chunk(path: Path, offset: int, buffer: bytearray, length: int, end: int) -> int:
    """One chunk into `buffer` (in a worker thread). The next chunk, up to `end`, is announced
    to the kernel first (POSIX_FADV_WILLNEED), so the disk reads ahead while this copy runs.
    The file is opened and closed here, in the thread: a job cancelled while a chunk is in
    flight never closes a descriptor under it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        following = min(length, end - offset - length)
        if following > 0 and hasattr(os, "posix_fadvise"):
            with contextlib.suppress(OSError):  # only a hint: a file system may refuse it
                os.posix_fadvise(fd, offset + length, following, os.POSIX_FADV_WILLNEED)
        return os.preadv(fd, [memoryview(buffer)[:length]], offset)
    finally:
        os.close(fd)


class ReadAhead:
    def __init__(self, settings: Settings, publish: Publish, host: HostRoom) -> None:
        self._settings = settings
        self._publish = publish
        # The room to fill: the ledger's free host budget (the outgoing runtime is still in it
        # while it drains), never beyond what is available now (else reading evicts what it
        # just read), less `memory.reserve`.
        self._host = host
        self._jobs: dict[str, Job] = {}  # by runtime key, until its load begins
        self._tasks: set[asyncio.Task[None]] = set()
        self._at_load: dict[str, dict[str, Any] | None] = {}  # figures frozen as a load began

    def start(
        self,
        incoming: Sequence[LaunchSpec],
        resident: Iterable[LaunchSpec],
        wants: Callable[[str], bool],
    ) -> None:
        """A lane began to drain for `incoming[0]`: read its files ahead. Never raises."""
        if not self._settings.runtime.readahead or not incoming:
            return
        spec = incoming[0]
        resident = list(resident)
        self._prune()
        running = self._jobs.get(spec.key)
        if (running and running.result == "reading") or any(r.key == spec.key for r in resident):
            return  # already reading, or it runs already
        try:
            job = self._plan_job(spec, lambda: wants(spec.key))
        except Exception as exc:  # never let the swap pay for a read-ahead's trouble
            self._failed(spec.key, spec.config.id, exc)
            return
        if job.plan.planned == 0:  # kept, so the load's capture says why nothing was read
            job.result = "skipped"
            self._jobs[spec.key] = job
            self._event(job, "skipped", reason="no room" if job.plan.total else "no files")
            return
        self._jobs[spec.key] = job
        self._event(job, "started", files=[p.name for p, _ in job.plan.reads])
        task = asyncio.get_running_loop().create_task(self._run(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def loading(self, key: str) -> None:
        """The load of `key` begins: stop reading, and keep what was read for its capture."""
        job = self._jobs.pop(key, None)
        if job is not None and job.result == "reading":
            job.stop = "stopped"  # the backend's own reads take over from here
        self._at_load[key] = job.figures() if job is not None else None

    def at_load(self, key: str) -> dict[str, Any] | None:
        """What the read-ahead had done when the load of `key` began (its capture's
        `readahead`); None when no read-ahead ran for it."""
        return self._at_load.pop(key, None)

    def _prune(self) -> None:
        """Finished reads whose swap nobody waits for any more are forgotten."""
        for key, job in list(self._jobs.items()):
            if job.result != "reading" and not job.wanted():
                del self._jobs[key]

    async def close(self) -> None:
        """Stop every job after its current chunk and wait for it (the router stops)."""
        for job in self._jobs.values():
            job.stop = "cancelled"
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _plan_job(self, spec: LaunchSpec, wanted: Callable[[], bool]) -> Job:
        files = {k: (p, _size(p)) for k, p in needed_files(spec.config, _lanes(spec)).items()}
        the_plan = plan(order_files(files), self._host.room())
        return Job(spec.key, spec.config.id, the_plan, wanted)

    async def _run(self, job: Job) -> None:
        try:
            await self._read(job)
        except Exception as exc:
            job.result = "failed"
            self._failed(job.key, job.model, exc, job)
        else:
            job.result = job.stop or "done"
            self._event(job, job.result)
        finally:
            # Kept (until its load or `_prune`), so a later load's capture says how it ended.
            job.seconds = time.monotonic() - job.started

    async def _read(self, job: Job) -> None:
        buffer = bytearray(min(CHUNK, max(n for _, n in job.plan.reads)))
        for path, length in job.plan.reads:
            offset = 0
            while offset < length:
                if job.stop is None and not job.wanted():
                    job.stop = "cancelled"  # every request for it gave up: no swap
                if job.stop is not None:
                    return
                n = min(len(buffer), length - offset)
                got = await asyncio.to_thread(read_chunk, path, offset, buffer, n, length)
                if got <= 0:
                    break  # the file shrank meanwhile
                offset += got
                job.bytes += got

    def _event(self, job: Job, result: str, **fields: Any) -> None:
        job.seconds = time.monotonic() - job.started
        figures = job.figures()
        self._publish(
            "readahead",
            runtime=job.key,
            model=job.model,
            result=result,
            bytes=figures["bytes"],
            planned=figures["planned"],
            total=figures["total"],
            seconds=figures["seconds"],
            **fields,
        )

    def _failed(self, key: str, model: str, exc: Exception, job: Job | None = None) -> None:
        log.warning("read-ahead of %s failed: %s", model, exc)
        if job is not None:
            self._event(job, "failed", reason=str(exc))
        else:
            self._publish("readahead", runtime=key, model=model, result="failed", reason=str(exc))


def _lanes(spec: LaunchSpec) -> Iterable[Any]:
    occupies = getattr(spec, "occupies", None)  # RuntimeSpec's lanes; a LaunchSpec has one
    return occupies or (spec.lane,)


def _size(path: Path) -> int:
    with contextlib.suppress(OSError):
        return path.stat().st_size
    return 0
