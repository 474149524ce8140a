"""The router's end of the analytics writer process (event_writer.py).

Per request the event loop only appends a tuple (`add_raw`); every `FRAME_ROWS` records, each
`interval` and on `sync()` the pending ones go down the pipe as one pickled frame. A frame is
kept until the process acknowledges that its rows are committed, so nothing is lost when the
process dies: the router then hands every unacknowledged and later record to its own writer
(`fallback`, the in-process Writer) and keeps recording without the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import sys
from collections.abc import Callable
from pathlib import Path

from router.store import event_writer
from router.store.rows import Raw, Row, rows_from_raws

log = logging.getLogger(__name__)

FRAME_ROWS = 256
CLOSE_TIMEOUT = 30.0
LAG_WARNING_FRAMES = 200  # ~51,000 records sent and not yet committed
_SCRIPT = Path(event_writer.__file__).resolve()


class EventChannel:
    def __init__(
        self, db_path: Path, interval: float, fallback: Callable[[list[Row]], None]
    ) -> None:
        self._db_path = db_path
        self._interval = interval
        self._fallback = fallback
        self._raws: list[Raw] = []
        self._unacked: dict[int, list[Raw]] = {}
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._seq = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._acks: asyncio.Task[None] | None = None  # reads acknowledgements until EOF
        self._ticker: asyncio.Task[None] | None = None
        self._closing = False
        self._gone = False  # the process no longer takes frames: closed, or died
        self.failed = False  # it died or stopped without being asked to

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def pending(self) -> int:
        return len(self._raws) + sum(len(raws) for raws in self._unacked.values())

    async def start(self) -> None:
        # -I -S: no site-packages, no environment; start_new_session: a terminal's Ctrl-C
        # reaches the router, which then closes the pipe (the process's one stop signal).
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            str(_SCRIPT),
            str(self._db_path),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self._acks = asyncio.create_task(self._read_acks(), name="store-event-acks")
        self._ticker = asyncio.create_task(self._tick(), name="store-event-tick")

    def add_raw(self, raw: Raw) -> None:
        self._raws.append(raw)
        if len(self._raws) >= FRAME_ROWS:
            self._send()

    async def sync(self) -> int:
        """Wait until everything recorded so far is committed or handed to the fallback.

        Returns how many records the process committed; ones handed over count at the fallback.
        """
        count = self.pending
        seq = self._send(marker=True)
        waiter = self._waiters.get(seq)
        if waiter is not None:
            await asyncio.shield(waiter)
        return 0 if self._gone else count

    async def close(self) -> None:
        self._closing = True
        if self._ticker is not None:
            self._ticker.cancel()
        self._send()
        proc = self._proc
        if proc is not None and proc.stdin is not None and not self._gone:
            with contextlib.suppress(ConnectionError):
                proc.stdin.close()
                await proc.stdin.wait_closed()
        try:
            if self._acks is not None:
                await asyncio.wait_for(self._acks, CLOSE_TIMEOUT)
        except TimeoutError:
            log.error("analytics writer process did not finish in %.0fs", CLOSE_TIMEOUT)
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self._hand_over()  # whatever was never acknowledged goes to the in-process writer

    def _send(self, *, marker: bool = False) -> int:
        if self._gone:
            self._hand_over()
            return self._seq
        if not (self._raws or marker):
            return self._seq
        raws, self._raws = self._raws, []
        self._seq += 1
        try:
            payload = pickle.dumps((self._seq, raws), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a value only the router can read: never fail the request
            log.error("analytics: a frame could not be encoded (%r); written in-process", exc)
            self._fallback(rows_from_raws(raws, log_skipped))
            raws = []
            payload = pickle.dumps((self._seq, raws))
        self._unacked[self._seq] = raws
        if len(self._unacked) == LAG_WARNING_FRAMES:
            log.warning(
                "analytics writer process is %d frames behind (database locked or disk slow?); "
                "the router holds them until they are written",
                LAG_WARNING_FRAMES,
            )
        if marker:
            self._waiters[self._seq] = asyncio.get_running_loop().create_future()
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(event_writer.LENGTH.pack(len(payload)) + payload)
        return self._seq

    async def _read_acks(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        while True:
            try:
                ack = await stdout.readexactly(event_writer.ACK.size)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            (seq,) = event_writer.ACK.unpack(ack)
            for done in [s for s in self._unacked if s <= seq]:
                del self._unacked[done]
            for done in [s for s in self._waiters if s <= seq]:
                self._waiters.pop(done).set_result(None)
        if not self._closing:
            code = await self._proc.wait()
            log.error(
                "analytics writer process exited (code %s); the router writes events itself",
                code,
            )
            self.failed = True
            self._hand_over()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self._send()

    def _hand_over(self) -> None:
        """From now on every record goes to the in-process writer, unacknowledged ones first."""
        self._gone = True
        rows: list[Row] = []
        for raws in (*self._unacked.values(), self._raws):
            rows += rows_from_raws(raws, log_skipped)
        self._unacked.clear()
        self._raws = []
        if rows:
            self._fallback(rows)
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()


def log_skipped(exc: Exception) -> None:
    log.error("analytics: unreadable event record skipped: %r", exc)
