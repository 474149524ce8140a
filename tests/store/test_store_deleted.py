"""A store file deleted while the router runs: the rows the router still holds open (the
deleted inode and its WAL) are copied into the new file, so nothing recorded is lost
(router/store/file_watch.py, docs/store.md). A real file, deleted as `rm` would."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from router.config import AnalyticsSection
from router.store import Store
from router.store.rows import Raw
from tests.support.harness import raw_record


def raw(i: int) -> Raw:
    return raw_record(wall=time.time(), bytes_in=i, tail=b'{"usage":{"total_tokens":3}}')


def stored(path: Path) -> tuple[list[int], str]:
    with sqlite3.connect(path) as db:
        ids = [int(r[0]) for r in db.execute("SELECT bytes_in FROM analytics_events")]
        return sorted(ids), str(db.execute("PRAGMA integrity_check").fetchone()[0])


@pytest.mark.parametrize("writer_process", [True, False], ids=["process", "in-process"])
async def test_rows_of_a_deleted_store_file_are_copied_into_the_new_one(
    tmp_path: Path, writer_process: bool
) -> None:
    path = tmp_path / "data" / "router.sqlite"
    settings = AnalyticsSection(flush_interval=0.2, writer_process=writer_process)
    store = await Store.open(path, node_id="n1", analytics=settings)
    detected: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    store.on_incident = lambda info: detected.done() or detected.set_result(info)
    try:
        for i in range(300):
            store.record_raw(raw(i))
        await store.flush()  # in the file itself (the WAL folded back)
        for i in range(300, 400):
            store.record_raw(raw(i))
        await store.summary(0, time.time() + 60)  # committed to the WAL only (a read settles)
        old_inode = path.stat().st_ino
        path.unlink()  # as `rm` would: the -wal and -shm stay
        for i in range(400, 500):  # recorded before the writer notices
            store.record_raw(raw(i))
        incident = await asyncio.wait_for(detected, 60)
        for i in range(500, 600):
            store.record_raw(raw(i))
        await store.flush()
    finally:
        await store.close()
    assert path.stat().st_ino != old_inode
    assert stored(path) == (list(range(600)), "ok")
    assert incident["change"] == "deleted" and incident["copied"] is True
    assert "nothing recorded was lost" in incident["message"]
    reopened = await Store.open(path, node_id="n1", analytics=settings)  # the schema is intact
    try:
        assert (await reopened.summary(0, time.time() + 60))["totals"]["requests"] == 600
    finally:
        await reopened.close()


async def test_a_file_deleted_just_before_close_is_copied_back(tmp_path: Path) -> None:
    """Deleted after the last identity check (an hour away here): the close, which would let
    the deleted inode go with its last handle, copies it back to the path first."""
    path = tmp_path / "router.sqlite"
    settings = AnalyticsSection(flush_interval=3600)
    store = await Store.open(path, node_id="n1", analytics=settings)
    try:
        for i in range(200):
            store.record_raw(raw(i))
        await store.flush()
        path.unlink()
        for i in range(200, 300):  # still in memory: written to the deleted file at close
            store.record_raw(raw(i))
    finally:
        await store.close()
    assert stored(path) == (list(range(300)), "ok")
    reopened = await Store.open(path, node_id="n1", analytics=settings)
    try:
        assert (await reopened.summary(0, time.time() + 60))["totals"]["requests"] == 300
    finally:
        await reopened.close()
