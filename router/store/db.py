"""Opening the SQLite file: owner-only permissions, pragmas, and numbered migrations.

Permissions are set by creating the file ourselves with mode 0600 before SQLite touches it
(changing the process umask would race with other threads). SQLite's unix VFS gives the -wal
and -shm files the database file's mode, and `secure_files()` chmods them again anyway.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

from router.errors import InternalError
from router.store.pragmas import BUSY_TIMEOUT_MS, WRITER_PRAGMAS

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def discover_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Every `NNNN_name.sql` in order; a gap or duplicate number is a packaging bug."""
    found: list[Migration] = []
    for path in sorted(directory.iterdir()):
        match = _MIGRATION_NAME.match(path.name)
        if match:
            found.append(Migration(int(match.group(1)), path.name, path.read_text("utf-8")))
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise InternalError(f"store migration {migration.name} breaks the numbering")
    return found


def prepare_path(path: Path) -> None:
    """Create the parent folder (0700 if new) and an empty 0600 file before SQLite opens it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    secure_files(path)


def secure_files(path: Path) -> None:
    for candidate in (path, *(Path(f"{path}{suffix}") for suffix in _SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(candidate, 0o600)


async def connect(path: Path, *, read_only: bool = False) -> aiosqlite.Connection:
    """A connection in autocommit mode; the writer opens its own transactions explicitly."""
    db = await aiosqlite.connect(path, isolation_level=None)
    try:
        await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")  # first: the rest may lock
        await db.execute("PRAGMA foreign_keys = ON")
        if read_only:
            await db.execute("PRAGMA query_only = ON")
        else:
            for pragma in WRITER_PRAGMAS:
                await db.execute(pragma)
            await db.execute("PRAGMA journal_mode = WAL")
    except BaseException:
        await db.close()
        raise
    return db


async def migrate(db: aiosqlite.Connection, migrations: list[Migration] | None = None) -> int:
    """Apply the migrations not yet in schema_version; returns the schema version reached."""
    migrations = discover_migrations() if migrations is None else migrations
    await db.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    async with db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version") as cur:
        row = await cur.fetchone()
    current = int(row[0]) if row else 0
    known = migrations[-1].version if migrations else 0
    if current > known:
        raise InternalError(
            f"the database schema is version {current}, newer than this router knows ({known})"
        )
    for migration in migrations[current:]:
        await _apply(db, migration)
    return max(current, known)


async def _apply(db: aiosqlite.Connection, migration: Migration) -> None:
    # One script so the DDL and its schema_version row commit together or not at all.
    record = (
        "INSERT INTO schema_version (version, name, applied_at) VALUES "
        f"({migration.version}, '{migration.name}', {time.time()!r});"
    )
    try:
        await db.executescript(f"BEGIN IMMEDIATE;\n{migration.sql}\n{record}\nCOMMIT;")
    except sqlite3.Error as exc:
        with contextlib.suppress(sqlite3.Error):
            await db.execute("ROLLBACK")
        raise InternalError(f"store migration {migration.name} failed: {exc}") from exc
