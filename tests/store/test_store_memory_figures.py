"""Measured memory figures (`store.memory`, migration 0008) on a real SQLite file: written
through the one writer, read back by a `FigureBook` after a restart, replaced per configuration
and fingerprint, and present in the store download's copy."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from router.config import AnalyticsSection
from router.memory.book import FigureBook
from router.memory.figures import Measured
from router.store import Store

MIB = 1 << 20


async def _open(path: Path) -> Store:
    return await Store.open(path, node_id="n1", analytics=AnalyticsSection(flush_interval=0.2))


async def test_a_figure_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "router.sqlite"
    store = await _open(path)
    book = FigureBook(store.memory, clock=lambda: 1_764_400_000.0)
    measured = Measured({"host": 30 * MIB, "gpu0": 2048 * MIB}, load_seconds=1.25)
    await book.record("chat-a", "f" * 32, measured, "report")
    assert book.lookup("chat-a", "f" * 32) == measured  # the cache, before any read
    await book.record("chat-b", "e" * 32, Measured({"host": 99}, None, oom=True), "raised")
    await store.close()

    store = await _open(path)
    try:
        again = FigureBook(store.memory)
        assert again.lookup("chat-a", "f" * 32) is None  # nothing until loaded
        await again.load()
        assert again.lookup("chat-a", "f" * 32) == measured
        assert again.lookup("chat-a", "0" * 32) is None  # another fingerprint: not this figure
        oom = again.entry("chat-b", "e" * 32)
        assert oom is not None and oom.method == "raised"
        assert oom.measured == Measured({"host": 99}, None, oom=True)
        latest = again.latest("chat-a")
        assert latest is not None and latest[0] == "f" * 32
        assert latest[1].measured_at == 1_764_400_000.0
    finally:
        await store.close()


async def test_a_new_measurement_replaces_the_row_and_the_download_carries_it(
    tmp_path: Path,
) -> None:
    store = await _open(tmp_path / "router.sqlite")
    try:
        book = FigureBook(store.memory)
        await book.record("chat-a", "a" * 32, Measured({"host": 10 * MIB}, 2.0), "process")
        await book.record("chat-a", "a" * 32, Measured({"host": 12 * MIB}, 1.0), "report")
        rows = await store.memory.rows()
        assert len(rows) == 1
        assert rows[0]["devices"] == {"host": 12 * MIB} and rows[0]["method"] == "report"
        assert rows[0]["oom"] is False and rows[0]["load_seconds"] == 1.0

        copy = await store.download_copy()  # what GET /router/v1/site/store/download streams
        try:
            with sqlite3.connect(copy) as db:
                found = db.execute(
                    "SELECT config_id, devices, method FROM memory_figures"
                ).fetchall()
        finally:
            copy.unlink()
        assert found == [("chat-a", '{"host": 12582912}', "report")]
    finally:
        await store.close()
