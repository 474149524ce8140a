"""Fixtures of the cluster tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
