"""A store file deleted or replaced while the router runs is noticed and replaced by a fresh one.

SQLite keeps writing to the inode it opened: after an `rm` (or a copy over the file) every
commit goes to a file nobody can read any more, a flush still says "persisted", and a restart
finds nothing. The writer task checks the file's identity (device and inode) every
`flush_interval`. When it changed, the store opens a fresh file at the same path with the
schema, moves its connections and the writer process there, logs an error naming the lost
window, and reports an incident (`on_incident`: the app raises a metric and the WebUI banner).

What is lost, stated in the incident: every row of the old file, and whatever was written
between the last check that saw the file intact (`intact_at`) and the detection
(`detected_at`), which went to the removed inode. Events recorded after the detection are
written to the new file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router.store.db import connect, migrate, prepare_path, secure_files

if TYPE_CHECKING:
    import aiosqlite

    from router.store.channel import EventChannel
    from router.store.writer import Writer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileIdentity:
    device: int
    inode: int


def identity_of(path: Path) -> FileIdentity | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return FileIdentity(st.st_dev, st.st_ino)


def change(opened: FileIdentity | None, now: FileIdentity | None) -> str | None:
    """`deleted`, `replaced`, or None while the path still names the file the store opened."""
    if opened is None or now == opened:
        return None
    return "deleted" if now is None else "replaced"


class FileWatch:
    """Mixin for Store: the identity check and the reopen."""

    path: Path
    _db: aiosqlite.Connection
    _reader: aiosqlite.Connection
    _writer: Writer
    _events: EventChannel | None

    def _watch_init(self) -> None:
        self._opened: FileIdentity | None = identity_of(self.path)
        self._intact_at = time.time()
        self.incidents: list[dict[str, Any]] = []
        self.on_incident: Callable[[dict[str, Any]], None] | None = None

    async def _start_events(self) -> None:  # Store's
        raise NotImplementedError

    async def check_file(self) -> dict[str, Any] | None:
        """Run by the writer task between writes; the incident when the file was replaced."""
        kind = change(self._opened, await asyncio.to_thread(identity_of, self.path))
        if kind is None:
            self._intact_at = time.time()
            return None
        intact_at, detected_at = self._intact_at, time.time()
        incident: dict[str, Any] = {
            "change": kind,
            "intact_at": intact_at,
            "detected_at": detected_at,
            "message": (
                f"the store file was {kind} while the router ran; a fresh file was opened. "
                "Lost: every row of the old file, and what was written between the last check "
                "that saw it intact and the detection"
            ),
        }
        log.error(
            "store file %s was %s while the router ran: opened a fresh file with the schema; "
            "lost every row of the old file and what was written between %s and %s",
            self.path,
            kind,
            _clock(intact_at),
            _clock(detected_at),
        )
        await self._reopen()
        self.incidents.append(incident)
        if self.on_incident is not None:
            self.on_incident(incident)
        return incident

    async def _reopen(self) -> None:
        await asyncio.to_thread(prepare_path, self.path)
        db = await connect(self.path)
        await migrate(db)
        reader = await connect(self.path, read_only=True)
        secure_files(self.path)
        old = (self._db, self._reader)
        self._db, self._reader = db, reader
        self._writer.swap(db)
        self._opened = identity_of(self.path)
        self._intact_at = time.time()
        events, self._events = self._events, None
        if events is not None:  # its process holds the old inode: a new one for the new file
            await events.close()  # what it did not commit goes to the in-process writer
            await self._start_events()
        for conn in old:
            with contextlib.suppress(Exception):
                await conn.close()


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


__all__ = ["FileIdentity", "FileWatch", "change", "identity_of"]
