"""The store's failures, named: a write or read that cannot finish answers within a deadline
with the cause (a full or read-only disk, or SQLite's own words) instead of waiting forever.

`describe` is the pure decision; `probe` looks at the filesystem holding the database.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from router.errors import StoreUnavailable

T = TypeVar("T")

# How long a flush, a read's settling of the buffer, or a download copy may take before the
# caller gets 503: the writer retries a full disk forever, and nobody should wait for that.
STORE_DEADLINE = 10.0
SETTING = "analytics.database_path"
# Free space under this is a full disk for SQLite (it grows files by pages, the WAL by frames).
NEARLY_FULL = 64 * 1024


def describe(exc: BaseException | None, free_bytes: int | None, read_only: bool) -> str:
    """Why the store cannot write, in a few words; pure."""
    if read_only or (isinstance(exc, OSError) and exc.errno == errno.EROFS):
        return "the filesystem is read-only"
    full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    full = full or (isinstance(exc, sqlite3.Error) and "full" in str(exc).lower())
    if full or (free_bytes is not None and free_bytes < NEARLY_FULL):
        return "the disk is full"
    if exc is not None:
        return str(exc) or type(exc).__name__
    return "the writer has not committed what it holds"


def probe(path: Path) -> tuple[int | None, bool]:
    """Free bytes for unprivileged writers, and whether the filesystem is mounted read-only."""
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return None, False
    return st.f_bavail * st.f_frsize, bool(st.f_flag & os.ST_RDONLY)


def cause(path: Path, exc: BaseException | None = None) -> str:
    return describe(exc, *probe(path))


async def within(path: Path, what: str, work: Awaitable[T]) -> T:
    """`work`, or StoreUnavailable (503) naming the cause once it fails or passes the deadline.
    Work still pending (held events) is kept and written when the disk allows it."""
    try:
        async with asyncio.timeout(STORE_DEADLINE):
            return await work
    except TimeoutError:
        why = await asyncio.to_thread(cause, path)
        raise StoreUnavailable(
            f"the analytics store cannot {what} within {STORE_DEADLINE:g}s: {why} ({SETTING})",
            retry_after=STORE_DEADLINE,
        ) from None
    except (sqlite3.Error, OSError) as exc:
        why = await asyncio.to_thread(cause, path, exc)
        raise StoreUnavailable(
            f"the analytics store cannot {what}: {why} ({SETTING})", retry_after=STORE_DEADLINE
        ) from None


__all__ = ["SETTING", "STORE_DEADLINE", "cause", "describe", "probe", "within"]
