"""The analytics writer process (store/event_writer.py) and the router's end of it (channel.py)."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from router.store import event_writer
from router.store.channel import FRAME_ROWS
from router.store.rows import COLUMNS, Raw, row_from_raw
from tests.support.harness import raw_record
from tests.support.store import open_store

SCRIPT = Path(event_writer.__file__).resolve()
# The in-process buffer's timer never fires within a test: what is committed came through the
# writer process or an explicit flush.
SLOW_FLUSH = 3600


def raw(i: int, **kw: Any) -> Raw:
    tail = b'{"usage":{"prompt_tokens":%d,"completion_tokens":1}}' % i
    fields = {"wall": 1_764_400_000.0 + i, "bytes_in": i, "bytes_out": 2 * i, "tail": tail}
    return raw_record(**{**fields, **kw})


def stored(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(
            f"SELECT {', '.join(COLUMNS)} FROM analytics_events ORDER BY id"
        ).fetchall()


async def test_events_are_committed_by_the_writer_process(tmp_path: Path) -> None:
    store = await open_store(tmp_path, flush_interval=SLOW_FLUSH)
    channel = store._events
    assert channel is not None and channel.pid is not None
    helper = psutil.Process(channel.pid)
    assert helper.ppid() == os.getpid() and "event_writer.py" in " ".join(helper.cmdline())
    records = [raw(i) for i in range(FRAME_ROWS + 7)]  # one full frame and a partial one
    for record in records:
        store.record_raw(record)
    assert await store.flush() == len(records)
    assert stored(store.path) == [row_from_raw(r) for r in records]
    assert stored(store.path)[3][COLUMNS.index("total_tokens")] == 4  # usage parsed there
    await store.close()
    assert not channel.failed and store.pending == 0
    assert not psutil.pid_exists(helper.pid) or helper.status() == psutil.STATUS_ZOMBIE


async def test_a_killed_writer_process_loses_nothing(tmp_path: Path) -> None:
    """Frames the process never acknowledged, and later events, reach the in-process writer."""
    store = await open_store(tmp_path, flush_interval=SLOW_FLUSH)
    channel = store._events
    assert channel is not None and channel.pid is not None
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the process cannot commit (and acknowledge) anything
    try:
        for i in range(FRAME_ROWS + 10):
            store.record_raw(raw(i))
        await asyncio.sleep(0.2)
        os.kill(channel.pid, signal.SIGKILL)
        assert channel._acks is not None
        await asyncio.wait_for(channel._acks, 10)  # the ack reader sees the exit and ends
        assert channel.failed
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    for i in range(FRAME_ROWS + 10, FRAME_ROWS + 20):
        store.record_raw(raw(i))
    await store.flush()
    await store.close()
    assert [row[COLUMNS.index("bytes_in")] for row in stored(store.path)] == list(
        range(FRAME_ROWS + 20)
    )


async def test_no_writer_process_when_analytics_is_off_or_in_process(tmp_path: Path) -> None:
    off = await open_store(tmp_path / "off", enabled=False, flush_interval=SLOW_FLUSH)
    inline = await open_store(tmp_path / "inline", writer_process=False, flush_interval=SLOW_FLUSH)
    try:
        assert off._events is None and inline._events is None
        inline.record_raw(raw(1))
        off.record_raw(raw(1))
        assert await inline.flush() == 1 and await off.flush() == 0
    finally:
        await off.close()
        await inline.close()
    assert stored(inline.path) == [row_from_raw(raw(1))]


def frame(seq: int, raws: list[Raw]) -> bytes:
    payload = pickle.dumps((seq, raws))
    return event_writer.LENGTH.pack(len(payload)) + payload


def schema(tmp_path: Path) -> Path:
    async def create() -> Path:
        store = await open_store(tmp_path, enabled=False, flush_interval=SLOW_FLUSH)
        await store.close()
        return store.path

    return asyncio.run(create())


def test_the_process_writes_everything_after_its_router_has_gone(tmp_path: Path) -> None:
    """A router killed by SIGKILL closes both pipes: acks fail, yet every frame is committed."""
    path = schema(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(SCRIPT), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    proc.stdout.close()  # nobody reads the acknowledgements any more
    bad = ("not", "a", "record")
    proc.stdin.write(frame(1, [raw(0), bad, raw(1)]) + frame(2, [raw(2), raw(3)]))
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0
    assert [row[COLUMNS.index("bytes_in")] for row in stored(path)] == [0, 1, 2, 3]
    assert b"unreadable event record skipped" in proc.stderr.read()


def test_the_process_ignores_sigterm_and_stops_at_end_of_input(tmp_path: Path) -> None:
    """systemd signals the whole service at once; the router still hands over its last events."""
    path = schema(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(SCRIPT), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin and proc.stdout
    proc.stdin.write(frame(1, [raw(0)]))
    proc.stdin.flush()
    assert proc.stdout.read(event_writer.ACK.size) == event_writer.ACK.pack(1)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    assert proc.poll() is None
    proc.stdin.write(frame(2, [raw(1)]))
    proc.stdin.close()
    assert proc.stdout.read() == event_writer.ACK.pack(2)
    assert proc.wait(timeout=20) == 0
    assert len(stored(path)) == 2


async def test_a_record_that_cannot_be_encoded_costs_only_itself(tmp_path: Path) -> None:
    """A value no process can encode never fails the request; the rest of its frame is kept."""

    class Opaque:  # local: pickle cannot encode it, SQLite cannot bind it
        pass

    store = await open_store(tmp_path, flush_interval=SLOW_FLUSH)
    channel = store._events
    assert channel is not None
    store.record_raw(raw(0))
    store.record_raw(raw(1, error=Opaque()))
    store.record_raw(raw(2))
    await store.flush()
    await store.close()
    assert not channel.failed and store.stats.rejected == 1
    assert [row[COLUMNS.index("bytes_in")] for row in stored(store.path)] == [0, 2]
