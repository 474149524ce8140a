"""GGUF headers of model files for the Ollama routes, read once per file in a worker thread.

The key is the file's SHA-256 when the catalog has hashed it (the same file under two names is
read once), else its resolved path, size and mtime (a file that changes is read again). The
Ollama routes ask with a bound: a header not read within it is answered blank this time and
is there for the next request; the router warms the cache at start so that is rare.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from router.memory import read_header

log = logging.getLogger(__name__)

Header = dict[str, Any]  # `GgufHeader.ollama()`
Key = tuple[str, ...]
READERS = 2  # model files share one disk on most boxes


def read_gguf_header(path: str) -> Header | None:
    """What Ollama's /api/show tells about the model in `path`, from the one GGUF reader
    (router/memory/gguf.py, which the estimate and the inventory share). Blocking."""
    header = read_header(path)
    return header.ollama() if header is not None else None


class GgufHeaders:
    """The Ollama routes' bounded, off-loop front of the one reader: a read under way is
    shared, and the answers are indexed by asset hash (the same bytes under another name are
    not read again) or file version; the parse itself is cached by the reader."""

    def __init__(
        self, read: Callable[[str], Header | None] = read_gguf_header, readers: int = READERS
    ) -> None:
        self._read = read  # replaceable: tests count the files really read
        self._slots = asyncio.Semaphore(readers)
        self._known: dict[Key, Header | None] = {}
        self._reading: dict[Key, asyncio.Task[Header | None]] = {}
        self.reads = 0

    async def get(self, path: Path, sha256: str | None, wait: float) -> Header | None:
        """The header of `path`, waiting at most `wait` seconds for a read under way."""
        key = _key(path, sha256)
        if key is None:
            return None
        if key in self._known:
            return self._known[key]
        task = self._start(key, path)
        with contextlib.suppress(TimeoutError):
            # Shielded: a caller that gives up leaves the read to finish for the next one.
            return await asyncio.wait_for(asyncio.shield(task), wait)
        return None

    def warm(self, files: Iterable[tuple[Path, str | None]]) -> None:
        """Start reading every file not read yet (the router's start)."""
        for path, sha256 in files:
            key = _key(path, sha256)
            if key is not None and key not in self._known:
                self._start(key, path)

    async def close(self) -> None:
        for task in self._reading.values():
            task.cancel()
        await asyncio.gather(*self._reading.values(), return_exceptions=True)

    def _start(self, key: Key, path: Path) -> asyncio.Task[Header | None]:
        task = self._reading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._read_now(key, path))
            self._reading[key] = task
            task.add_done_callback(lambda _t: self._reading.pop(key, None))
        return task

    async def _read_now(self, key: Key, path: Path) -> Header | None:
        async with self._slots:
            self.reads += 1
            try:
                header = await asyncio.to_thread(self._read, os.fspath(path))
            except Exception:  # a reader bug must not fail the routes that ask
                log.exception("reading the GGUF header of %s failed", path.name)
                header = None
        self._known[key] = header
        return header


def _key(path: Path, sha256: str | None) -> Key | None:
    if sha256:
        return ("sha256", sha256)
    try:
        stat = path.stat()  # one syscall; the header itself is read in a thread
    except OSError:
        return None
    return ("file", str(path.resolve()), str(stat.st_size), str(stat.st_mtime_ns))
