"""For the residency tests over the fake backend: the ledger counts estimates only.

A ready runtime is measured (router/runtime/measuring.py) and its figure replaces the estimate;
the fake backend's figure is its Python process's RSS, which varies from run to run, so tests
whose budgets are computed from the estimates turn the measurement after a load off. The
out-of-memory path (`failed`) stays on. Measurement itself is tested in test_measuring.py."""

from __future__ import annotations

import os
from typing import Any

import pytest

from router.appkeys import CATALOG
from router.domain import Lane
from router.runtime.measuring import Measuring
from router.runtime.state import spec_for
from tests.support.harness import RouterHarness


@pytest.fixture
def no_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Measuring, "loaded", lambda self, runtime, launched, lines: None)


def sized_models(harness: RouterHarness, sizes: dict[str, int]) -> None:
    """Models whose files are sparse files of the given sizes (so their estimates are known)."""
    for model_id, size in sizes.items():
        harness.model(model_id)
        os.truncate(harness.models_dir / f"{model_id}.gguf", size)


async def start_with_room(
    harness: RouterHarness, fit: list[str] | None = None, **runtime: Any
) -> Any:
    """Start with a host budget that holds exactly the models in `fit` (all: unbounded)."""
    base = harness.settings(residency="memory", **runtime)
    if fit is None:
        return await harness.start(base)
    await harness.start(base)
    assert harness.app is not None
    catalog = harness.app[CATALOG]
    book = harness.runtimes.ledger.holdings
    need = sum(book.estimate(spec_for(catalog.require(m), Lane.TEXT)).devices["host"] for m in fit)
    await harness.close()
    memory = base.memory.model_copy(update={"host_budget": need, "reserve": 0})
    return await harness.start(base.model_copy(update={"memory": memory}))
