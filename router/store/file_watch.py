"""A store file deleted or replaced while the router runs is noticed and replaced by a fresh one.

SQLite keeps writing to the inode it opened: after an `rm` (or a move over the file) every
commit goes to a file nobody can open any more, a flush still says "persisted", and a restart
finds nothing. The writer task checks the file's identity (device and inode) every
`flush_interval`. When it changed, the store opens a fresh file at the same path with the
schema, moves its connections and the writer process there, logs an error, and reports an
incident (`on_incident`: the app raises a metric and the WebUI banner).

A deleted file is still readable through the connection that holds it open, WAL included:
its rows, and what was written to it after the `rm`, are copied into the new file with
SQLite's backup API before that connection closes, so nothing recorded is lost; a clean
close checks once more after its last write (`copy_if_deleted`). A replaced
file (another one moved to the path) is kept as it is: the old rows are lost, and whatever
was written between the last check that saw the file intact (`intact_at`) and the detection
(`detected_at`), as the incident states. When the copy fails (a full disk) the deletion costs
what a replacement does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router.errors import StoreUnavailable
from router.store import copies
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
        copied = await self._reopen(kind)
        incident: dict[str, Any] = {
            "change": kind,
            "intact_at": intact_at,
            "detected_at": detected_at,
            "copied": copied,
            "message": f"the store file was {kind} while the router ran; a fresh file was "
            f"opened. {_COPIED if copied else _LOST}",
        }
        log.error(
            "store file %s was %s while the router ran: %s",
            self.path,
            kind,
            _logged(copied, intact_at, detected_at),
        )
        self.incidents.append(incident)
        if self.on_incident is not None:
            self.on_incident(incident)
        return incident

    async def copy_if_deleted(self) -> Path | None:
        """At close, after the last write: a file deleted since the last check would go with
        its last handle. Its copy, for the caller to rename to the path once every handle is
        closed; None when the file is intact (or replaced: that one is kept) or the copy failed."""
        if change(self._opened, await asyncio.to_thread(identity_of, self.path)) != "deleted":
            return None
        copy = await self._copy_out()
        log.error(
            "store file %s was deleted while the router ran: %s at close",
            self.path,
            "its rows were copied to the path" if copy else "its rows could not be kept",
        )
        return copy

    async def _reopen(self, kind: str) -> bool:
        """Move to a fresh file at the path; True when the old file's rows were copied into it."""
        events, self._events = self._events, None
        if events is not None:  # its process holds the old inode: it commits what it has first
            await events.close()  # what it did not commit goes to the in-process writer
        copy = await self._copy_out() if kind == "deleted" else None
        # Every old connection closes before a file exists at the path again: the last one to
        # close folds the WAL and deletes `<path>-wal` and `-shm` by name, which must still be
        # the old file's, not the new one's.
        for conn in (self._reader, self._db):
            with contextlib.suppress(Exception):
                await conn.close()
        if copy is not None:
            await asyncio.to_thread(os.replace, copy, self.path)
        await asyncio.to_thread(prepare_path, self.path)
        db = await connect(self.path)
        await migrate(db)
        self._db, self._reader = db, await connect(self.path, read_only=True)
        secure_files(self.path)
        self._writer.swap(db)
        self._opened = identity_of(self.path)
        self._intact_at = time.time()
        if events is not None:
            await self._start_events()
        return copy is not None

    async def _copy_out(self) -> Path | None:
        """The deleted file's rows, read through the connection that still holds it open (its
        WAL too), in a private temp file beside the path; None when the copy failed."""
        try:
            dest = await asyncio.to_thread(copies.temp_copy_path, self.path)
        except StoreUnavailable as exc:
            log.error("the deleted store file's rows could not be copied: %s", exc)
            return None
        try:
            # The backup runs on the writer connection's own thread: the target must allow it.
            target = await asyncio.to_thread(sqlite3.connect, dest, check_same_thread=False)
            try:
                await self._db.backup(target)
                await asyncio.to_thread(copies.self_contained, target)
            finally:
                await asyncio.to_thread(target.close)
        except (OSError, sqlite3.Error) as exc:
            log.error("the deleted store file's rows could not be copied: %s", exc)
            with contextlib.suppress(OSError):
                os.unlink(dest)
            return None
        return dest


_COPIED = "Every row of the old file was copied into it: nothing recorded was lost"
_LOST = (
    "Lost: every row of the old file, and what was written between the last check that saw "
    "it intact and the detection"
)


def _logged(copied: bool, intact_at: float, detected_at: float) -> str:
    if copied:
        return "copied every row of the open (deleted) file into a fresh file at the path"
    return (
        "opened a fresh file with the schema; lost every row of the old file and what was "
        f"written between {_clock(intact_at)} and {_clock(detected_at)}"
    )


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


__all__ = ["FileIdentity", "FileWatch", "change", "identity_of"]
