"""Memory sizes in settings, and the `memory` section's defaults (router/config/sizes.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from router.config import Settings
from router.config.sizes import format_size, parse_size, parse_size_or_auto


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("600MiB", 600 << 20),
        ("1GiB", 1 << 30),
        ("1.5 GiB", 3 << 29),
        ("512KiB", 512 << 10),
        ("2G", 2 << 30),
        ("2048", 2048),
        (4096, 4096),
        ("10b", 10),
        ("1tib", 1 << 40),
    ],
)
def test_sizes_parse(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "-1MiB", "1 XB", "MiB", "1e400", True, None, [1], "auto"])
def test_bad_sizes_say_how_to_write_one(bad: object) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(bad)


def test_auto_is_a_word_only_where_allowed() -> None:
    assert parse_size_or_auto(" AUTO ") == "auto"
    assert parse_size_or_auto("1GiB") == 1 << 30


@given(st.integers(min_value=0, max_value=1 << 50), st.sampled_from(["KiB", "MiB", "GiB"]))
def test_whole_units_round_trip(n: int, unit: str) -> None:
    factor = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
    if n * factor < 1 << 62:
        assert parse_size(f"{n}{unit}") == n * factor


def test_format_size_reads_back_close() -> None:
    assert format_size(600 << 20) == "600 MiB"
    assert format_size(3 << 29) == "1.5 GiB"
    assert format_size(12) == "12 B"


def test_memory_section_defaults_and_errors() -> None:
    memory = Settings().memory
    assert (memory.host_budget, memory.gpu_budget, memory.reserve) == ("auto", "auto", 1 << 30)
    chosen = Settings.model_validate({"memory": {"host_budget": "600MiB", "reserve": "0"}})
    assert chosen.memory.host_budget == 600 << 20 and chosen.memory.reserve == 0
    with pytest.raises(ValidationError, match="host_budget"):
        Settings.model_validate({"memory": {"host_budget": "lots"}})
    with pytest.raises(ValidationError, match="extra"):
        Settings.model_validate({"memory": {"budget": "1GiB"}})
