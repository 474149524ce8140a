"""The store's pure decisions: how a write failure is named, and when the file was replaced."""

from __future__ import annotations

import errno
import sqlite3

from router.store.file_watch import FileIdentity, change
from router.store.health import NEARLY_FULL, describe


def test_a_failure_is_named_by_its_cause() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    assert describe(full, 10**9, False) == "the disk is full"
    assert describe(OSError(errno.ENOSPC, "No space left"), None, False) == "the disk is full"
    assert describe(None, NEARLY_FULL - 1, False) == "the disk is full"
    assert (
        describe(OSError(errno.EROFS, "Read-only"), 10**9, False) == "the filesystem is read-only"
    )
    assert describe(full, 0, True) == "the filesystem is read-only"
    locked = sqlite3.OperationalError("database is locked")
    assert describe(locked, 10**9, False) == "database is locked"
    assert describe(None, 10**9, False) == "the writer has not committed what it holds"


def test_the_file_identity_tells_deleted_from_replaced() -> None:
    opened = FileIdentity(1, 100)
    assert change(opened, opened) is None
    assert change(opened, FileIdentity(1, 100)) is None
    assert change(opened, None) == "deleted"
    assert change(opened, FileIdentity(1, 101)) == "replaced"
    assert change(opened, FileIdentity(2, 100)) == "replaced"
    assert change(None, None) is None  # nothing was opened to compare with
