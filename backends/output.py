"""A backend child's stdout and stderr: read without blocking, split into lines, kept in a ring.

The supervisor (backends/process.py) owns the process; this owns its two pipes. Reads are
non-blocking and driven by the event loop's readers, so a grandchild that keeps a pipe open
never delays exit detection (R2). Lines are handed to an observer while the backend loads
(readiness, load progress, the load capture) and only kept in the ring once it serves.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import Callable
from typing import IO

log = logging.getLogger(__name__)

MAX_LINE = 16384  # longer lines are emitted (and kept) in pieces of this size
# Once serving (after `detach`), a pipe is left alone this long after each read so the
# child's next writes arrive as one read: llama-server writes each log line in several
# write()s, ~6 lines per request, and every read woke the router's event loop (~75 us per
# request in bench/RESULTS.md, issue 17). Before that, lines are read as they come: the
# readiness line and load progress must not wait. (10 ms was tried: the swap-heavy
# tests/runtime/test_grouped_queue.py then timed out twice on a loaded box; cause not found.)
READ_COALESCE_S = 0.004


class ProcessOutput:
    """The output of one child, named `name` in log messages.

    `on_output(stream, line)` gets each stdout/stderr line as bytes without its line ending;
    lines longer than MAX_LINE arrive in pieces.
    """

    def __init__(
        self, name: str, ring_lines: int, on_output: Callable[[str, bytes], None] | None
    ) -> None:
        self._name = name
        self._on_output = on_output
        self._coalesce = False  # set by detach: the backend is serving
        # Raw lines, decoded only when read (tail): a serving llama-server writes ~30 lines
        # per request, and most are never read (bench/profile_proxy.py).
        self._ring: collections.deque[bytes] = collections.deque(maxlen=max(1, ring_lines))
        self._partial: dict[str, bytes] = {}
        self._streams: dict[str, IO[bytes]] = {}
        self._eof = asyncio.Event()
        self.last_output_at = 0.0

    def tail(self, n: int = 50) -> list[str]:
        """The last n output lines of both streams, in arrival order."""
        lines = list(self._ring)[-n:] if n > 0 else []
        return [line.decode("utf-8", errors="replace") for line in lines]

    def attach(self, loop: asyncio.AbstractEventLoop, streams: dict[str, IO[bytes] | None]) -> None:
        """Start reading the freshly spawned child's pipes (named "stdout", "stderr")."""
        self.last_output_at = time.monotonic()
        for name, fh in streams.items():
            assert fh is not None
            fd = fh.fileno()
            os.set_blocking(fd, False)
            self._streams[name] = fh
            self._partial[name] = b""
            loop.add_reader(fd, self._on_wake, loop, name, fd)

    def detach(self) -> None:
        """Stop calling `on_output`: its readers (readiness, load progress, the load capture)
        are done once the backend is up, and a serving backend logs lines per request, so its
        reads are coalesced from now on."""
        self._on_output = None
        self._coalesce = True

    def read_buffered(self) -> None:
        """Take what the child wrote before exiting, so tail() has its last words."""
        for name, fh in list(self._streams.items()):
            for _ in range(64):  # bounded: a grandchild may keep writing
                if not self._on_readable(name, fh.fileno()):
                    break

    async def drain(self, limit: float) -> None:
        """Wait for EOF briefly; then stop reading whatever a survivor still holds."""
        try:
            await asyncio.wait_for(self._eof.wait(), limit)
        except TimeoutError:
            for name in list(self._streams):
                self._close_stream(name)

    def _on_wake(self, loop: asyncio.AbstractEventLoop, name: str, fd: int) -> None:
        if self._on_readable(name, fd) and self._coalesce and name in self._streams:
            loop.remove_reader(fd)
            loop.call_later(READ_COALESCE_S, self._rearm, loop, name, fd)

    def _rearm(self, loop: asyncio.AbstractEventLoop, name: str, fd: int) -> None:
        fh = self._streams.get(name)
        if fh is not None and not fh.closed and fh.fileno() == fd:
            loop.add_reader(fd, self._on_wake, loop, name, fd)

    def _on_readable(self, name: str, fd: int) -> bool:
        """Read one chunk; False when nothing was available."""
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._close_stream(name)
            return False
        self.last_output_at = time.monotonic()
        buf = self._partial[name] + data
        *lines, rest = buf.split(b"\n")
        while len(rest) > MAX_LINE:  # bound memory for output that never ends a line
            lines.append(rest[:MAX_LINE])
            rest = rest[MAX_LINE:]
        self._partial[name] = rest
        if self._on_output is None and len(buf) <= MAX_LINE and b"\r" not in buf:
            self._ring.extend(lines)  # detached, short lines: all the loop below would do
            return True
        for line in lines:
            line = line.rstrip(b"\r")
            if self._on_output is None and len(line) <= MAX_LINE:
                self._ring.append(line)  # detached (serving): all _emit would do
                continue
            for start in range(0, max(len(line), 1), MAX_LINE):
                self._emit(name, line[start : start + MAX_LINE])
        return True

    def _emit(self, name: str, line: bytes) -> None:
        self._ring.append(line)
        if self._on_output is not None:
            try:
                self._on_output(name, line)
            except Exception:  # a broken observer must not stop the reader
                log.exception("on_output callback failed for %s", self._name)

    def _close_stream(self, name: str) -> None:
        fh = self._streams.pop(name, None)
        if fh is None:
            return
        rest = self._partial.pop(name, b"")
        if rest:
            self._emit(name, rest.rstrip(b"\r"))
        try:
            asyncio.get_running_loop().remove_reader(fh.fileno())
        except (RuntimeError, ValueError):
            pass
        fh.close()
        if not self._streams:
            self._eof.set()
