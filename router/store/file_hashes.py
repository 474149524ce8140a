"""Cached file hashes in the store (`file_hashes`, router/site/hashing.py): the store's part
`Store.file_hashes`: `rows` and `add`."""

from __future__ import annotations

from router.store.access import Access
from router.store.upsert import upsert_sql
from router.store.writer import Op

_COLUMNS = ("path", "size", "mtime_ns", "sha256", "metadata", "hashed_at")
_UPSERT = upsert_sql("file_hashes", _COLUMNS, "path")


class FileHashes:
    def __init__(self, access: Access) -> None:
        self._db = access

    async def rows(self) -> dict[str, tuple[int, int, str, str | None]]:
        """Resolved path -> (size, mtime_ns, sha256, metadata JSON) for every cached file."""
        rows = await self._db.rows("SELECT path, size, mtime_ns, sha256, metadata FROM file_hashes")
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}

    def add(self, row: tuple[str, int, int, str, str | None, float]) -> None:
        """Buffer one upsert, O(1); written with the next batch (a read settles it first)."""
        self._db.writer.add_op(Op(_UPSERT, row))
