"""When did the supervisor signal a backend's tree? R1's timing is the gap between its
SIGTERM and its SIGKILL, both sent by the router itself: measured there, it does not depend on
how fast a loaded machine lets the killed process die and be reaped (which the R1 tests' old
stop-to-return windows of 0.95-1.3 s also counted, and flaked on)."""

from __future__ import annotations

import signal
import time

import pytest

from backends.process import SupervisedProcess


class SignalSpy:
    def __init__(self) -> None:
        self.sent: list[tuple[int, float]] = []  # (signal, time.monotonic()) in order

    def first(self, sig: int) -> float | None:
        return next((at for s, at in self.sent if s == sig), None)

    def term_to_kill(self) -> float | None:
        """Seconds from the first SIGTERM to the first SIGKILL (None: no SIGKILL sent)."""
        term, kill = self.first(signal.SIGTERM), self.first(signal.SIGKILL)
        assert term is not None, f"no SIGTERM was sent: {self.sent}"
        return None if kill is None else kill - term


def spy_on_signals(monkeypatch: pytest.MonkeyPatch) -> SignalSpy:
    spy = SignalSpy()
    original = SupervisedProcess._signal_tree

    def recording(self: SupervisedProcess, sig: int) -> None:
        spy.sent.append((sig, time.monotonic()))
        original(self, sig)

    monkeypatch.setattr(SupervisedProcess, "_signal_tree", recording)
    return spy
