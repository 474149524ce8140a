"""SHA-256 of model files, cached by (resolved path, size, mtime) in the store's `file_hashes`.

A file is read only when the cache has no row for its current size and mtime: a second
inventory of the same files reads none of them, and a file that changed is read again. The
reading runs in worker threads (`asyncio.to_thread`), at most `workers` at a time, so the event
loop keeps serving; two requests that need the same file share one read.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from router.memory import read_header
from router.site.files import FileStat, kind_of

CHUNK = 1 << 20
HASH_WORKERS = 2  # model files share one disk on most boxes; more readers only seek more


@dataclass(frozen=True, slots=True)
class Digest:
    sha256: str
    metadata: Mapping[str, Any] | None = None  # GGUF header keys, when the file is a GGUF


# (resolved path, size, mtime_ns) -> Digest, or None when the file changed while being read.
Hasher = Callable[[FileStat], Digest | None]


class HashRows(Protocol):
    """The store's side: rows of `file_hashes` (`Store.file_hashes` implements it)."""

    async def rows(self) -> dict[str, tuple[int, int, str, str | None]]: ...

    def add(self, row: tuple[str, int, int, str, str | None, float]) -> None: ...


def digest_file(stat: FileStat) -> Digest | None:
    """Blocking: hash `stat.real`; None if it is not the file `stat` describes (it changed)."""
    sha = hashlib.sha256()
    try:
        with open(stat.real, "rb") as fh:
            if _stamp(os.fstat(fh.fileno())) != stat.stamp:
                return None
            while chunk := fh.read(CHUNK):
                sha.update(chunk)
            if _stamp(os.fstat(fh.fileno())) != stat.stamp:
                return None
    except OSError:
        return None
    header = read_header(stat.real) if kind_of(stat.real) == "gguf" else None
    meta = header.inventory() if header is not None else None
    return Digest(sha.hexdigest(), meta)


def _stamp(st: os.stat_result) -> tuple[int, int]:
    return (st.st_size, st.st_mtime_ns)


class HashCache:
    def __init__(
        self, rows: HashRows, hasher: Hasher = digest_file, workers: int = HASH_WORKERS
    ) -> None:
        self.rows = rows
        self.hasher = hasher  # replaceable: tests count the files really read
        self._slots = asyncio.Semaphore(workers)
        self._inflight: dict[tuple[str, int, int], asyncio.Task[Digest | None]] = {}

    async def known(self) -> dict[str, tuple[int, int, str, str | None]]:
        """Every cached row: resolved path -> (size, mtime_ns, sha256, metadata JSON)."""
        return await self.rows.rows()

    async def digests(self, stats: Iterable[FileStat]) -> dict[str, Digest]:
        """Resolved path -> Digest for each file that could be read; cached ones are not read."""
        cached = await self.known()
        out: dict[str, Digest] = {}
        todo: dict[str, FileStat] = {}
        for stat in stats:
            row = cached.get(stat.real)
            if row is not None and (row[0], row[1]) == stat.stamp:
                out[stat.real] = Digest(row[2], _meta(row[3]))
            else:
                todo.setdefault(stat.real, stat)
        fresh = await asyncio.gather(*(self._read(s) for s in todo.values()))
        for stat, digest in zip(todo.values(), fresh, strict=True):
            if digest is not None:
                out[stat.real] = digest
        return out

    async def _read(self, stat: FileStat) -> Digest | None:
        key = (stat.real, stat.size, stat.mtime_ns)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._read_now(stat))
            self._inflight[key] = task
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        # Shielded: one caller that gives up must not cancel the read another one waits for.
        return await asyncio.shield(task)

    async def _read_now(self, stat: FileStat) -> Digest | None:
        async with self._slots:
            digest = await asyncio.to_thread(self.hasher, stat)
        # Kept here, in the shared task, so a read finished for a client that went away (or
        # timed out on a long cold inventory) is not lost.
        if digest is not None:
            meta = json.dumps(digest.metadata) if digest.metadata is not None else None
            self.rows.add((stat.real, stat.size, stat.mtime_ns, digest.sha256, meta, time.time()))
        return digest


def _meta(raw: str | None) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
