"""For the residency tests over the fake backend: the ledger counts estimates only.

A ready runtime is measured (router/runtime/measuring.py) and its figure replaces the estimate;
the fake backend's figure is its Python process's RSS, which varies from run to run, so tests
whose budgets are computed from the estimates turn the measurement after a load off. The
out-of-memory path (`failed`) stays on. Measurement itself is tested in test_measuring.py."""

from __future__ import annotations

import pytest

from router.runtime.measuring import Measuring


@pytest.fixture
def no_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Measuring, "loaded", lambda self, runtime, launched, lines: None)
