"""Consistent copies of the store's file: a backup (one point in time, self-contained, 0600)
and the private temp file a download is copied to, next to the database; temp copies a crash
left behind are removed when the store opens."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from pathlib import Path

from router.errors import StoreUnavailable
from router.store.db import prepare_path
from router.store.health import SETTING, cause

_DOWNLOAD_MARK = ".download-"


def prepare(path: Path) -> Path:
    """The store's absolute path, its folder and file made ready (db.prepare_path), and the
    temp copies left beside it removed."""
    path = path.expanduser().absolute()
    prepare_path(path)
    for stale in path.parent.glob(f".{path.name}{_DOWNLOAD_MARK}*"):
        with contextlib.suppress(OSError):  # temp copies left behind by a crash mid-download
            stale.unlink()
    return path


def backup(source: Path, dest: Path) -> int:
    """Copy the database at `source` to `dest` (0600); returns the copy's bytes."""
    # A fresh connection: the backup holds one read snapshot for its single step while the
    # writer keeps committing to the WAL; the copy is then made self-contained (no WAL).
    fd = os.open(dest, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    os.chmod(dest, 0o600)
    src = sqlite3.connect(source)
    try:
        src.execute(f"PRAGMA busy_timeout = {5000}")
        dst = sqlite3.connect(dest)
        try:
            src.backup(dst, pages=-1)
            self_contained(dst)
        finally:
            dst.close()
    finally:
        src.close()
    return dest.stat().st_size


def self_contained(copy: sqlite3.Connection) -> None:
    """A copy's header says WAL as its source's did: rollback mode makes it one file, so no
    `-wal` beside its path (perhaps another database's) is ever read as its own."""
    copy.execute("PRAGMA journal_mode = DELETE")


def temp_copy_path(path: Path) -> Path:
    """A new private (0600, mkstemp) empty file next to the database, for a download's copy."""
    try:
        fd, name = tempfile.mkstemp(
            prefix=f".{path.name}{_DOWNLOAD_MARK}", suffix=".sqlite", dir=path.parent
        )
    except OSError as exc:
        raise StoreUnavailable(
            f"the analytics store cannot copy the database: {cause(path, exc)} ({SETTING})"
        ) from None
    os.close(fd)
    return Path(name)
