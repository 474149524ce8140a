"""One backend init job: its state, progress events and captured output (in memory).

The output is kept the way a load capture is (router/store/captures.py): ordered chunks
tagged stdout or stderr, capped at `setup.max_output_mb` with the last kept chunk marked
truncated, paged with `after_sequence`. Progress events are kept whole (a few per step), so
a client that connects late replays them from the start.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from router.store.captures import STREAMS, LiveCapture

Chunk = tuple[int, str, float, bytes, bool]  # sequence, stream, time, data, truncated


class JobState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass
class SetupJob:
    id: str
    node_id: str
    backend_id: str
    version: str
    step_names: list[str]
    cap_bytes: int
    started_at: float = field(default_factory=time.time)
    state: JobState = JobState.RUNNING
    phase: str = "preparing"
    step: int = 0
    ended_at: float | None = None
    error: str | None = None
    retryable: bool = False
    probe_output: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    _started: float = field(default_factory=time.monotonic)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._live = LiveCapture(self.cap_bytes)

    @property
    def done(self) -> bool:
        return self.state is not JobState.RUNNING

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change; take it before reading `events` so none is missed."""
        return self._changed

    def elapsed(self) -> float:
        end = self.ended_at - self.started_at if self.ended_at else None
        return round(end if end is not None else time.monotonic() - self._started, 3)

    def output(self, stream: str, data: bytes) -> None:
        if stream not in STREAMS or not data:
            return
        admitted = self._live.admit(data)
        if admitted is not None:
            chunk, truncated = admitted
            self.chunks.append((self._live.sequence, stream, time.time(), chunk, truncated))

    def advance(self, phase: str, step: int | None = None) -> dict[str, Any]:
        self.phase = phase
        if step is not None:
            self.step = step
        return self._note()

    def finish(
        self, state: JobState, error: str | None = None, *, retryable: bool = False
    ) -> dict[str, Any]:
        self.state, self.error, self.retryable = state, error, retryable
        self.phase = "done"
        self.ended_at = time.time()
        return self._note()

    def _note(self) -> dict[str, Any]:
        event = {"event": "backend_init", "time": time.time(), **self.progress()}
        self.events.append(event)
        self._changed.set()
        self._changed = asyncio.Event()
        return event

    def progress(self) -> dict[str, Any]:
        name = self.step_names[self.step - 1] if 0 < self.step <= len(self.step_names) else None
        return {
            "job_id": self.id,
            "node_id": self.node_id,
            "backend_id": self.backend_id,
            "state": self.state.value,
            "phase": self.phase,
            "step": self.step,
            "steps": len(self.step_names),
            "step_name": name,
            "elapsed_s": self.elapsed(),
            "error": self.error,
        }

    def record(self) -> dict[str, Any]:
        """The job as the routes show it."""
        base = f"/router/v1/site/nodes/backends/init/{self.id}"
        return {
            "id": self.id,
            "object": "backend.init_job",
            **self.progress(),
            "version": self.version,
            "step_names": list(self.step_names),
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "retryable": self.retryable,
            "probe_output": self.probe_output,
            "output_bytes": self._live.stored,
            "output_truncated": self._live.truncated,
            "events_url": f"{base}/events?node_id={self.node_id}",
            "output_url": f"{base}/output?node_id={self.node_id}",
        }


def output_page(
    job_id: str, chunks: list[Chunk], truncated: bool, finished: bool, after: int, limit: int
) -> dict[str, Any]:
    """The load-capture output shape (`GET site/load-captures/{id}/output`)."""
    later = [c for c in chunks if c[0] > after]
    page = [
        {
            "sequence": s,
            "stream": st,
            "time": t,
            "data": base64.b64encode(d).decode("ascii"),
            "truncated": tr,
        }
        for s, st, t, d, tr in later[:limit]
    ]
    return {
        "job_id": job_id,
        "chunks": page,
        "next_after_sequence": page[-1]["sequence"] if page else after,
        "more": len(later) > limit,
        "truncated": truncated,
        "finished": finished,
    }
