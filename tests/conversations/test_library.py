"""The library's memory (router/conversations/library.py): which conversation a prompt
belongs to, which saved state it gets (the longest that matches, never one that does not),
the bound per key, and an index that survives a restart with digests only."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from router.conversations import Library, Prompt, SavedState, choose_to_keep, parse

KEY = "k" * 32


def _prompt(*contents: str) -> Prompt:
    msgs = [{"role": "user", "content": c} for c in contents]
    found = parse("/v1/chat/completions", json.dumps({"messages": msgs}).encode())
    assert found is not None
    return found


def _save(lib: Library, prompt: Prompt, name: str, now: float) -> None:
    conv = lib.note(KEY, prompt, now=now).conversation
    lib.saved(conv, SavedState(name, len(prompt.chain), prompt.chain[-1], 10))


def test_a_returning_prompt_gets_its_conversations_saved_state(tmp_path: Path) -> None:
    lib = Library(tmp_path / "library.json", 16)
    _save(lib, _prompt("a", "b"), "ab.bin", 1)
    _save(lib, _prompt("x"), "x.bin", 2)
    noted = lib.note(KEY, _prompt("a", "b", "c"), now=3)
    assert noted.restore is not None and noted.restore.name == "ab.bin"
    assert lib.note(KEY, _prompt("a", "z"), now=4).restore is None  # an edit: a new one
    assert lib.note("other" * 6, _prompt("a", "b", "c"), now=5).restore is None  # another key


@settings(max_examples=50)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6), st.integers(1, 8))
def test_the_longest_matching_saved_prefix_wins(lengths: list[int], asked: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        lib = Library(Path(folder) / "library.json", 16)
        words = [f"w{i}" for i in range(8)]
        # Saved conversations "w0..w{n-1}", the longer first: a prompt that extends a
        # conversation continues it (its new state replaces the old), so shorter prefixes are
        # conversations of their own only when they come after.
        lengths = sorted(set(lengths), reverse=True)
        for i, n in enumerate(lengths):
            _save(lib, _prompt(*words[:n]), f"{n}-{i}.bin", float(i))
        assert len(lib.files(KEY)) == len(lengths)
        noted = lib.note(KEY, _prompt(*words[:asked]), now=100)
        fitting = [n for n in lengths if n <= asked]
        if not fitting:
            assert noted.restore is None
        else:
            assert noted.restore is not None
            assert noted.restore.units == 1 + max(fitting)  # unit 0: the template settings


def test_the_bound_drops_the_least_recently_used_with_its_file(tmp_path: Path) -> None:
    lib = Library(tmp_path / "library.json", 2)
    _save(lib, _prompt("a"), "a.bin", 1)
    _save(lib, _prompt("b"), "b.bin", 2)
    lib.note(KEY, _prompt("a", "more"), now=3)  # a is used again: b is now the oldest
    noted = lib.note(KEY, _prompt("c"), now=4)
    assert noted.evicted == ("b.bin",)
    assert lib.files(KEY) == {"a.bin"}


def test_the_index_keeps_digests_only_owner_only_and_survives_a_restart(tmp_path: Path) -> None:
    index = tmp_path / "library.json"
    lib = Library(index, 16)
    _save(lib, _prompt("secret words", "more secret"), "s.bin", 1)
    assert "secret" not in index.read_text()
    assert stat.S_IMODE(index.stat().st_mode) == 0o600
    again = Library(index, 16)
    noted = again.note(KEY, _prompt("secret words", "more secret", "next"), now=2)
    assert noted.restore is not None and noted.restore.name == "s.bin"
    assert noted.conversation.replay is not None  # the prompt is held again, in memory


def test_a_lost_file_is_forgotten_and_a_dirty_one_is_a_candidate(tmp_path: Path) -> None:
    lib = Library(tmp_path / "library.json", 16)
    _save(lib, _prompt("a"), "a.bin", 1)
    lib.lost(KEY, "a.bin")
    conv = lib.note(KEY, _prompt("a", "b"), now=2).conversation
    assert conv.saved is None and lib.files(KEY) == set()
    assert lib.candidates(KEY, "one") == []  # held by no process: nothing to replay
    lib.hold(conv, "one")
    [cand] = lib.candidates(KEY, "one")
    assert cand.id == conv.id and lib.candidates(KEY, "two") == []
    lib.forget_instance("one")
    assert lib.candidates(KEY, "one") == []


def test_the_choice_on_a_worked_example() -> None:
    from router.conversations import Candidate

    cands = [Candidate("old", 1, 100), Candidate("big", 3, 900), Candidate("new", 4, 200)]
    # 1 byte a token, 500 bytes: new (200) fits, big (900) not, old (100) fits after it.
    assert choose_to_keep(cands, 16, 500, 1.0) == ["new", "old"]
    assert choose_to_keep(cands, 1, 500, 1.0) == ["new"]


def test_saved_of_lists_one_configurations_states_and_when_each_was_used(tmp_path: Path) -> None:
    """What the model page sums (count, tokens, last use): only that configuration's states,
    only those saved (a conversation noted but never saved has nothing on disk)."""
    lib = Library(tmp_path / "library.json", 16)
    for config, contents, name, now in (("a", "x", "x.bin", 1.0), ("a", "y", "y.bin", 2.0)):
        conv = lib.note(KEY, _prompt(contents), now=now, config=config).conversation
        lib.saved(conv, SavedState(name, 1, conv.digest, 10))
    lib.note(KEY, _prompt("z"), now=3.0, config="a")  # not saved
    lib.note(KEY, _prompt("w"), now=4.0, config="b")
    assert sorted((s.name, used) for s, used in lib.saved_of("a")) == [
        ("x.bin", 1.0),
        ("y.bin", 2.0),
    ]
    assert lib.saved_of("b") == []
