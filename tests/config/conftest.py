"""Fixtures of the configuration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from router.config import Catalog
from router.domain import BackendMode


@pytest.fixture
async def cat(tmp_path: Path) -> AsyncIterator[Catalog]:
    """A catalog of the `.kcpps` files a test writes into `tmp_path` (llama_sdcpp mode)."""
    catalog = Catalog(tmp_path, BackendMode.LLAMA_SDCPP)
    yield catalog
    await catalog.close()
