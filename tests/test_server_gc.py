"""serve() freezes start-up objects out of the cyclic collector and raises its young threshold."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from router import server
from tests.support.harness import RouterHarness, free_port


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


async def test_serve_tunes_the_collector_once_listening(
    harness: RouterHarness, restore_gc: None
) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    base = harness.settings()
    server_section = base.server.model_copy(update={"bind": f"127.0.0.1:{free_port()}"})
    settings = base.model_copy(update={"server": server_section})
    seen: list[tuple[tuple[int, ...], int]] = []
    stop = asyncio.Event()

    def ready(names: list[str]) -> None:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        stop.set()

    await asyncio.wait_for(server.serve(settings, on_ready=ready, stop=stop), 60)
    assert seen and seen[0][0] == server.GC_THRESHOLDS
    assert seen[0][1] > 10_000  # the modules, settings and app built at start-up
