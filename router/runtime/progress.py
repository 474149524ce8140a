"""Load progress: the backend's own output turned into `load_progress` events.

Backends say little about how far a load is: llama.cpp and KoboldCpp print what they are
doing (reading tensors, allocating buffers, warming up), vLLM and sd.cpp sometimes print a
percentage. The event carries the last line as phase text, a percentage only when the line has
one, and the time since the load began; the UI shows an indeterminate bar next to the usual
load time otherwise. Events are throttled per load (the newest line wins and is sent at the end
of the interval), because a backend may print thousands of lines in a second.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from router.errors import sanitize

OutputSink = Callable[[str, bytes], None]
Publish = Callable[..., Any]
MAX_PHASE = 160
MIN_INTERVAL = 0.5
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_PERCENT = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d+)?)\s?%")


def parse_line(line: bytes) -> tuple[str, float | None] | None:
    """(phase text, percent or None) of one output line; None for a line with no text.

    The phase is printable text without colour codes, absolute paths and more than
    MAX_PHASE characters; the percent is the last `NN%` on the line, if it is 0..100.
    """
    text = _CONTROL.sub("", _ANSI.sub("", line.decode("utf-8", "replace"))).strip()
    if not text:
        return None
    percent: float | None = None
    for match in _PERCENT.finditer(text):
        value = float(match.group(1))
        if value <= 100:
            percent = value
    phase = sanitize(text)
    if len(phase) > MAX_PHASE:
        phase = phase[: MAX_PHASE - 1] + "…"
    return phase, percent


class LoadProgress:
    """Publishes `load_progress` for one load attempt; `close()` when the load ends."""

    def __init__(
        self,
        publish: Publish,
        identity: Mapping[str, Any],
        clock: Callable[[], float] = time.monotonic,
        min_interval: float = MIN_INTERVAL,
    ) -> None:
        self._publish = publish
        self._identity = dict(identity)
        self._clock = clock
        self._interval = min_interval
        self._started = clock()
        self._last_sent = float("-inf")
        self._pending: tuple[str, float | None] | None = None
        self._percent: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def tee(self, sink: OutputSink | None) -> OutputSink:
        def on_output(stream: str, line: bytes) -> None:
            self.output(line)
            if sink is not None:
                sink(stream, line)

        return on_output

    def output(self, line: bytes) -> None:
        parsed = parse_line(line)
        if parsed is None or self._closed:
            return
        self._pending = parsed
        wait = self._last_sent + self._interval - self._clock()
        if wait <= 0:
            self._send()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(wait, self._send)

    def _send(self) -> None:
        self._timer = None
        if self._pending is None or self._closed:
            return
        phase, percent = self._pending
        self._pending = None
        # A line without a number keeps the last known percentage (it does not go back to 0).
        self._percent = percent if percent is not None else self._percent
        self._last_sent = now = self._clock()
        self._publish(
            "load_progress",
            **self._identity,
            phase=phase,
            percent=self._percent,
            elapsed_seconds=round(now - self._started, 3),
        )

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
