"""Download jobs, the download library and learned asset origins in the store (migration
0003): a mixin of `Store`.

Rows are dicts of columns; writes go through the store's one writer and return once they are
on disk (a job's state must survive a crash the moment it is reported).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import aiosqlite

from router.store.writer import Op, Writer

JOB_COLUMNS = (
    "id", "node_id", "repository", "revision", "commit_sha", "state", "files_json",
    "bytes_total", "bytes_done", "error", "created_at", "updated_at", "finished_at",
)  # fmt: skip
LIBRARY_COLUMNS = (
    "path", "repository", "commit_sha", "repo_path", "size", "sha256", "verified_by",
    "job_id", "downloaded_at",
)  # fmt: skip


def _upsert(table: str, columns: Sequence[str], key: str) -> str:
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != key)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        f" ON CONFLICT ({key}) DO UPDATE SET {updates}"
    )


_JOB_UPSERT = _upsert("download_jobs", JOB_COLUMNS, "id")
_LIBRARY_UPSERT = _upsert("download_library", LIBRARY_COLUMNS, "path")
MAX_JOBS_LISTED = 200
ORIGIN_COLUMNS = ("sha256", "repository", "commit_sha", "repo_path", "bound_at")
_ORIGIN_UPSERT = _upsert("asset_origins", ORIGIN_COLUMNS, "sha256")


class DownloadRows:
    """What `Store` provides to this mixin: its writer, its reader and `_settle()`."""

    _writer: Writer
    _reader: aiosqlite.Connection

    async def _settle(self) -> None:
        raise NotImplementedError

    async def _write(self, sql: str, params: Sequence[Any]) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._writer.add_op(Op(sql, tuple(params), future), urgent=True)
        return await future

    async def save_download_job(self, row: Mapping[str, Any]) -> None:
        await self._write(_JOB_UPSERT, [row[c] for c in JOB_COLUMNS])

    async def save_library_entry(self, row: Mapping[str, Any]) -> None:
        await self._write(_LIBRARY_UPSERT, [row[c] for c in LIBRARY_COLUMNS])

    async def delete_library_entry(self, path: str) -> None:
        await self._write("DELETE FROM download_library WHERE path = ?", (path,))

    async def download_jobs(self, limit: int = MAX_JOBS_LISTED) -> list[dict[str, Any]]:
        """Newest first."""
        await self._settle()
        sql = f"SELECT {', '.join(JOB_COLUMNS)} FROM download_jobs ORDER BY created_at DESC LIMIT ?"
        return await self._select(sql, (limit,), JOB_COLUMNS)

    async def library_entries(self) -> list[dict[str, Any]]:
        await self._settle()
        sql = f"SELECT {', '.join(LIBRARY_COLUMNS)} FROM download_library ORDER BY path"
        return await self._select(sql, (), LIBRARY_COLUMNS)

    async def _select(self, sql: str, params: Sequence[Any], columns: Sequence[str]) -> list[dict[str, Any]]:  # fmt: skip
        async with self._reader.execute(sql, params) as cursor:
            rows = await cursor.fetchall()
        return [dict(zip(columns, row, strict=True)) for row in rows]

    async def save_asset_origin(self, row: Mapping[str, Any]) -> None:
        await self._write(_ORIGIN_UPSERT, [row[c] for c in ORIGIN_COLUMNS])

    async def asset_origin(self, sha256: str) -> dict[str, Any] | None:
        await self._settle()
        sql = f"SELECT {', '.join(ORIGIN_COLUMNS)} FROM asset_origins WHERE sha256 = ?"
        rows = await self._select(sql, (sha256,), ORIGIN_COLUMNS)
        return rows[0] if rows else None
