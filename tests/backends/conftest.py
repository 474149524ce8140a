"""Fixtures of the backend process tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import proctree


@pytest.fixture
def clean_tree() -> Iterator[None]:
    """This process adopts its orphans (a subreaper), and no backend process outlives the
    test (the modules that start processes use it)."""
    proctree.enable_subreaper()
    yield
    proctree.assert_no_leftovers()
