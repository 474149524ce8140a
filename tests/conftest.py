"""Shared fixtures: `harness` is a real router on a real socket with fake backends; after the
test the router is closed and no backend process may outlive it (tests/support/harness.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.harness import RouterHarness, harness_fixture


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[RouterHarness]:
    async for h in harness_fixture(tmp_path):
        yield h
