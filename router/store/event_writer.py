"""The analytics writer process: reads event frames on stdin, commits them, acknowledges each.

Run by the router as `python -I -S event_writer.py DB_PATH` (store/channel.py starts it); it
needs nothing beyond the standard library and rows.py, so it starts in milliseconds. Moving
the per-request rounding, usage parsing and SQLite inserts here keeps them off the router's
event loop and its interpreter lock (bench/analytics measured the difference).

Protocol. In: frames of a 4-byte big-endian length and a pickle of `(seq, raws)`, raws being
`rows.Raw` records. Out: the 8-byte big-endian `seq` of every
frame once its rows are committed (an empty frame is a sync marker). The router is the only
writer of stdin, so unpickling it is as safe as the router itself.

It ignores SIGINT and SIGTERM, which reach a whole process group or service at once: the
router hands over what it still holds and closes stdin, and end-of-input is the one signal to
finish. If the router dies, even by SIGKILL, stdin ends and whatever arrived is still written.
"""

from __future__ import annotations

import os
import pickle
import signal
import sqlite3
import struct
import sys
import time
from pathlib import Path
from typing import BinaryIO

if __name__ == "__main__":  # run as a script: import rows.py without the router package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from router.store.pragmas import WRITER_PRAGMAS  # noqa: E402
from router.store.rows import INSERT_EVENT, Row, rows_from_raws  # noqa: E402

LENGTH = struct.Struct(">I")
ACK = struct.Struct(">Q")
RETRY_DELAYS = (0.05, 0.2, 1.0)
GIVE_UP_AFTER_EOF = 30.0  # seconds of a locked database after the router has gone


def log(message: str) -> None:
    sys.stderr.write(f"tensor-router event writer: {message}\n")
    sys.stderr.flush()


def _skipped(exc: Exception) -> None:
    log(f"unreadable event record skipped: {exc!r}")


def read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    (size,) = LENGTH.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in WRITER_PRAGMAS:
        db.execute(pragma)
    return db


def insert(db: sqlite3.Connection, rows: list[Row]) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        db.executemany(INSERT_EVENT, rows)
        db.execute("COMMIT")
    except BaseException:
        # SQLite has already rolled back after some errors (a full disk); a ROLLBACK then
        # fails with "no transaction is active", which must not hide the real cause.
        if db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        raise


def commit(db: sqlite3.Connection, rows: list[Row], parent: int) -> None:
    """Insert all rows; wait out a locked database; a row SQLite refuses is logged and skipped.

    While the router lives it holds these rows for a resend, so waiting is safe; once it has
    gone, the wait is bounded so the process cannot outlive it for long.
    """
    attempt = 0
    deadline: float | None = None
    while True:
        try:
            insert(db, rows)
            return
        except sqlite3.OperationalError as exc:
            if deadline is None and os.getppid() != parent:
                deadline = time.monotonic() + GIVE_UP_AFTER_EOF
            if deadline is not None and time.monotonic() > deadline:
                log(f"gave up on {len(rows)} event(s) after the router stopped: {exc}")
                return
            delay = RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)]
            attempt += 1
            if attempt in (1, 10) or attempt % 100 == 0:
                log(f"write failed ({exc}); retrying")
            time.sleep(delay)
        except sqlite3.Error:
            break
    for row in rows:  # one bad row must not cost the others
        try:
            insert(db, [row])
        except sqlite3.Error as exc:
            log(f"event refused ({exc}); skipped")


def serve(db: sqlite3.Connection, stdin: BinaryIO, ack_fd: int, parent: int) -> None:
    acking = True
    while (frame := read_frame(stdin)) is not None:
        seq, raws = pickle.loads(frame)
        batch = rows_from_raws(raws, _skipped)
        if batch:
            commit(db, batch, parent)
        if acking:
            try:
                os.write(ack_fd, ACK.pack(seq))  # unbuffered: nothing left to flush at exit
            except BrokenPipeError:
                acking = False  # the router has gone; still write what it sent


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    db = connect(argv[1])
    try:
        serve(db, sys.stdin.buffer, sys.stdout.fileno(), parent)
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
