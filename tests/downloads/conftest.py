"""The download tests' fake Hugging Face hub (tests/fakes/fake_hub.py) on a real socket."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.fake_hub import FakeHub


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    hub = await FakeHub().start()
    try:
        yield hub
    finally:
        await hub.close()
