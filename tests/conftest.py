"""The fixtures every folder uses; a folder's own live in its conftest.py.

`harness` is a real router in this process on a real socket with fake backends
(tests/support/harness.py); `tmp_harness` is the same set-up for tests that run the router as a
`tensor-router start` subprocess (tests/support/router_process.py `new_router`). After either,
no backend process may outlive the test.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.harness import RouterHarness, harness_fixture
from tests.support.proctree import enable_subreaper, live_descendants, reap_zombie_children
from tests.support.router_process import RouterProcess

# Property tests check what a pure function decides, never how fast: Hypothesis's default 200 ms
# deadline and its slow-generation health check measured the machine's load instead (under two
# suites at once, 3 of 5 seeded runs of the pure property tests failed). Loaded before any test
# module is imported, so every `@settings(...)` in the tests starts from this profile.
settings.register_profile("router", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("router")


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[RouterHarness]:
    async for h in harness_fixture(tmp_path):
        yield h


@pytest.fixture
def tmp_harness(tmp_path: Path) -> Iterator[RouterHarness]:
    """Routers started with `new_router(tmp_harness)` are killed after the test; the test
    process is a child subreaper, so what they orphaned is reaped here and counted."""
    enable_subreaper()
    h = RouterHarness(tmp_path)
    routers: list[RouterProcess] = []
    h.routers = routers  # type: ignore[attr-defined]
    try:
        yield h
    finally:
        for r in routers:
            r.kill()
        deadline = time.monotonic() + 3
        while live_descendants() and time.monotonic() < deadline:
            reap_zombie_children()
            time.sleep(0.05)
        left = live_descendants()
        for p in left:
            p.kill()
        time.sleep(0.1)
        reap_zombie_children()
        assert left == [], f"processes outlived the router: {left}"
