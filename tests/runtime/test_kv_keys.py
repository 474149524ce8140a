"""KV persistence's pure parts: the cache key, slot choice and the disk cap's eviction order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.runtime.kvkeys import (
    CacheEntry,
    cache_key,
    over_budget,
    parse_slot_file,
    persist_enabled,
    slot_file,
    slots_to_save,
)
from router.runtime.kvprobe import verdict

ARGV = ["llama-server", "-m", "/m/a.gguf", "--port", "4001", "-c", "2048", "--slot-save-path", "/s"]
FILES = {"/m/a.gguf": (1000, 17), "llama-server": (50, 3)}


def test_key_ignores_the_port_and_the_save_folder() -> None:
    moved = [*ARGV]
    moved[4] = "5999"
    moved[-1] = "/elsewhere"
    assert cache_key("abc", moved, FILES) == cache_key("abc", ARGV, FILES)


def test_key_changes_with_context_config_model_and_binary() -> None:
    base = cache_key("abc", ARGV, FILES)
    bigger = [*ARGV]
    bigger[6] = "4096"
    assert cache_key("abc", bigger, FILES) != base
    assert cache_key("abd", ARGV, FILES) != base
    assert cache_key("abc", ARGV, {**FILES, "/m/a.gguf": (1000, 18)}) != base
    assert cache_key("abc", ARGV, {**FILES, "llama-server": (51, 3)}) != base


def test_auto_follows_the_probe_and_on_off_decide_alone() -> None:
    for probe in (None, True, False):
        assert persist_enabled("on", probe)
        assert not persist_enabled("off", probe)
    assert persist_enabled("auto", True)
    assert not persist_enabled("auto", False)
    assert not persist_enabled("auto", None)


def test_probe_verdict() -> None:
    assert verdict(100, 99, "abc", "abc")
    assert verdict(100, 90, "abc", "abc")
    assert not verdict(100, 89, "abc", "abc")
    assert not verdict(100, 100, "abc", "abd")
    assert not verdict(0, 0, "", "")


def test_slot_file_names_round_trip_and_reject_others() -> None:
    key = "0123456789abcdef0123456789abcdef"
    assert parse_slot_file(slot_file(key, 3)) == (key, 3)
    assert parse_slot_file(slot_file(key, 3, "18eea6f2614bf816")) == (key, 3)
    for bad in ("x.bin", f"{key}-slot3.json", f"../{key}-slot3.bin", f"{key}-slot-1.bin"):
        assert parse_slot_file(bad) is None


def test_slots_holding_a_prompt_are_saved() -> None:
    answer = [
        {"id": 0, "n_ctx": 2048, "is_processing": False},
        {"id": 3, "n_ctx": 2048, "is_processing": False, "n_prompt_tokens": 19},
        {"id": 1, "is_processing": True, "n_prompt_tokens": 5},  # drained runtimes: not seen
        {"id": 2, "n_prompt_tokens": 0},
        "junk",
    ]
    assert slots_to_save(answer) == [3]
    assert slots_to_save({"error": "x"}) == []


def test_budget_removes_least_recently_used_first() -> None:
    entries = [CacheEntry("a", 40, 3.0), CacheEntry("b", 40, 1.0), CacheEntry("c", 40, 2.0)]
    assert over_budget(entries, 80, frozenset()) == ["b"]
    assert over_budget(entries, 40, frozenset()) == ["b", "c"]
    assert over_budget(entries, 120, frozenset()) == []
    # The files just written go last, even when they are the oldest by mtime.
    assert over_budget(entries, 40, frozenset({"b"})) == ["c", "a"]


entry_lists = st.lists(
    st.builds(
        CacheEntry,
        st.text("abcdef", min_size=1, max_size=4),
        st.integers(0, 1000),
        st.floats(0, 100, allow_nan=False),
    ),
    unique_by=lambda e: e.name,
    max_size=12,
)


@given(entry_lists, st.integers(0, 5000), st.data())
def test_budget_properties(entries: list[CacheEntry], budget: int, data: st.DataObject) -> None:
    names = [e.name for e in entries]
    keep = frozenset(data.draw(st.lists(st.sampled_from(names), unique=True)) if names else [])
    doomed = over_budget(entries, budget, keep)
    left = [e for e in entries if e.name not in doomed]
    assert len(set(doomed)) == len(doomed)
    # What stays fits, unless nothing is left to remove.
    assert sum(e.size for e in left) <= budget or not left
    if doomed:
        # Removing one file fewer would not have fitted: no file is removed needlessly.
        last = next(e for e in entries if e.name == doomed[-1])
        assert sum(e.size for e in left) + last.size > budget
    # Every removed file not kept is older than (or as old as) every kept-in-place non-kept one.
    removed_plain = [e for e in entries if e.name in doomed and e.name not in keep]
    stayed_plain = [e for e in left if e.name not in keep]
    if removed_plain and stayed_plain:
        assert max(e.last_used for e in removed_plain) <= min(e.last_used for e in stayed_plain)
    # A kept file goes only once every other file is gone.
    if any(n in keep for n in doomed):
        assert not stayed_plain
