"""A download job: its files, state, progress and numbered events (what `jobs/{id}` and
`jobs/{id}/events` show). The loop owns a `Job`; its worker thread only adds to `file_done`.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from router.downloads.plan import RepoFile
from router.downloads.transfer import Control

MAX_EVENTS = 500
RATE_WINDOW = 5.0


class State(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


TERMINAL = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED})
RESUMABLE = frozenset({State.PAUSED, State.INTERRUPTED})


@dataclass
class Job:
    id: str
    node_id: str
    repository: str
    revision: str | None
    commit: str
    files: tuple[RepoFile, ...]
    state: State = State.QUEUED
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    done_paths: set[str] = field(default_factory=set)
    current: int | None = None  # index into files of the one transferring
    file_done: int = 0  # bytes of the current file (written by the worker thread)
    control: Control = field(default_factory=Control)
    events: collections.deque[dict[str, Any]] = field(
        default_factory=lambda: collections.deque(maxlen=MAX_EVENTS)
    )
    next_event: int = 1
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    samples: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)

    @property
    def bytes_total(self) -> int:
        return sum(f.size or 0 for f in self.files)

    @property
    def bytes_done(self) -> int:
        finished = sum(f.size or 0 for f in self.files if f.path in self.done_paths)
        return finished + (self.file_done if self.current is not None else 0)

    def rate(self, now: float) -> float:
        """Bytes per second over the last few seconds."""
        self.samples.append((now, self.bytes_done))
        while self.samples and now - self.samples[0][0] > RATE_WINDOW:
            self.samples.popleft()
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def progress(self, now: float) -> dict[str, Any]:
        rate = self.rate(now) if self.state is State.RUNNING else 0.0
        left = self.bytes_total - self.bytes_done
        current = self.files[self.current] if self.current is not None else None
        return {
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "rate_bytes_per_second": round(rate, 1),
            "eta_seconds": round(left / rate, 1) if rate > 0 else None,
            "file": None
            if current is None
            else {
                "path": current.path,
                "bytes_done": self.file_done,
                "size": current.size,
                "index": self.current,
                "count": len(self.files),
            },
        }

    def publish(self, kind: str, **data: Any) -> None:
        self.events.append(
            {
                "id": self.next_event,
                "event": kind,
                "job_id": self.id,
                "state": self.state.value,
                "time": time.time(),
                **data,
            }
        )
        self.next_event += 1
        self.changed.set()
        self.changed = asyncio.Event()  # waiters hold the old one, already set

    def move(self, state: State, error: str | None = None) -> None:
        self.state, self.updated_at = state, time.time()
        if error is not None:
            self.error = error
        if state in TERMINAL:
            self.finished_at = self.updated_at
            self.current = None
        self.publish("state", error=self.error, **self.progress(time.monotonic()))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "node_id": self.node_id,
            "repository": self.repository,
            "revision": self.revision or "main",
            "commit": self.commit,
            "state": self.state.value,
            "error": self.error,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
            "files": [{**f.to_json(), "done": f.path in self.done_paths} for f in self.files],
            **self.progress(time.monotonic()),
        }

    def to_row(self) -> dict[str, Any]:
        files = [
            {
                "path": f.path,
                "size": f.size,
                "sha256": f.sha256,
                "blob_id": f.blob_id,
                "done": f.path in self.done_paths,
            }
            for f in self.files
        ]
        return {
            "id": self.id,
            "node_id": self.node_id,
            "repository": self.repository,
            "revision": self.revision,
            "commit_sha": self.commit,
            "state": self.state.value,
            "files_json": json.dumps(files),
            "bytes_total": self.bytes_total,
            "bytes_done": self.bytes_done,
            "error": self.error,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        files = json.loads(row["files_json"])
        job = cls(
            id=row["id"],
            node_id=row["node_id"],
            repository=row["repository"],
            revision=row["revision"],
            commit=row["commit_sha"],
            state=State(row["state"]),
            files=tuple(RepoFile(f["path"], f["size"], f["sha256"], f["blob_id"]) for f in files),
            error=row["error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            finished_at=row["finished_at"],
        )
        job.done_paths = {f["path"] for f in files if f["done"]}
        return job
