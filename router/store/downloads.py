"""Download jobs, the download library and learned asset origins in the store (migration
0003): `Store.downloads`.

Rows are dicts of columns; writes go through the store's one writer and return once they are
on disk (a job's state must survive a crash the moment it is reported).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.store.access import Access
from router.store.upsert import upsert_sql

JOB_COLUMNS = (
    "id",
    "node_id",
    "repository",
    "revision",
    "commit_sha",
    "state",
    "files_json",
    "bytes_total",
    "bytes_done",
    "error",
    "created_at",
    "updated_at",
    "finished_at",
)
LIBRARY_COLUMNS = (
    "path",
    "repository",
    "commit_sha",
    "repo_path",
    "size",
    "sha256",
    "verified_by",
    "job_id",
    "downloaded_at",
)


_JOB_UPSERT = upsert_sql("download_jobs", JOB_COLUMNS, "id")
_LIBRARY_UPSERT = upsert_sql("download_library", LIBRARY_COLUMNS, "path")
MAX_JOBS_LISTED = 200
ORIGIN_COLUMNS = ("sha256", "repository", "commit_sha", "repo_path", "bound_at")
_ORIGIN_UPSERT = upsert_sql("asset_origins", ORIGIN_COLUMNS, "sha256")


class DownloadRows:
    def __init__(self, access: Access) -> None:
        self._db = access

    async def save_job(self, row: Mapping[str, Any]) -> None:
        await self._db.write(_JOB_UPSERT, [row[c] for c in JOB_COLUMNS])

    async def save_library_entry(self, row: Mapping[str, Any]) -> None:
        await self._db.write(_LIBRARY_UPSERT, [row[c] for c in LIBRARY_COLUMNS])

    async def delete_library_entry(self, path: str) -> None:
        await self._db.write("DELETE FROM download_library WHERE path = ?", (path,))

    async def jobs(self, limit: int = MAX_JOBS_LISTED) -> list[dict[str, Any]]:
        """Newest first."""
        sql = f"SELECT {', '.join(JOB_COLUMNS)} FROM download_jobs ORDER BY created_at DESC LIMIT ?"
        return await self._db.dicts(sql, (limit,), JOB_COLUMNS)

    async def library_entries(self) -> list[dict[str, Any]]:
        sql = f"SELECT {', '.join(LIBRARY_COLUMNS)} FROM download_library ORDER BY path"
        return await self._db.dicts(sql, (), LIBRARY_COLUMNS)

    async def save_asset_origin(self, row: Mapping[str, Any]) -> None:
        await self._db.write(_ORIGIN_UPSERT, [row[c] for c in ORIGIN_COLUMNS])

    async def asset_origin(self, sha256: str) -> dict[str, Any] | None:
        sql = f"SELECT {', '.join(ORIGIN_COLUMNS)} FROM asset_origins WHERE sha256 = ?"
        rows = await self._db.dicts(sql, (sha256,), ORIGIN_COLUMNS)
        return rows[0] if rows else None
