"""Read-ahead (issue 26): what to read within the host room, pure (router/runtime/readahead.py;
the room itself: tests/memory/test_memory_host.py)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from router.runtime.readahead import order_files, plan

sizes = st.lists(st.integers(min_value=1, max_value=1 << 40), max_size=6)


@given(sizes, st.integers(min_value=-(1 << 40), max_value=1 << 42))
def test_a_plan_reads_what_fits_in_order_and_never_more(files: list[int], fits: int) -> None:
    named = [(Path(f"f{i}.gguf"), size) for i, size in enumerate(files)]
    chosen = plan(named, fits)
    assert chosen.total == sum(files)
    assert chosen.planned == min(sum(files), max(0, fits))
    assert chosen.capped == (chosen.planned < chosen.total)
    # A prefix of the files, each read from its start; only the last one may be partial.
    for i, (path, amount) in enumerate(chosen.reads):
        assert path == named[i][0]
        assert 0 < amount <= named[i][1]
        if i < len(chosen.reads) - 1:
            assert amount == named[i][1]


def test_a_capped_plan_reads_the_main_model_first_in_part() -> None:
    files = order_files(
        {
            "mmproj": (Path("/m/proj.gguf"), 300),
            "model_param": (Path("/m/main.gguf"), 1000),
            "draftmodel": (Path("/m/draft.gguf"), 100),
        }
    )
    assert [p.name for p, _ in files] == ["main.gguf", "draft.gguf", "proj.gguf"]
    chosen = plan(files, 1050)
    assert chosen.reads == ((Path("/m/main.gguf"), 1000), (Path("/m/draft.gguf"), 50))
    assert chosen.capped
    assert plan(files, 0).reads == ()  # nothing fits: skipped


def test_the_same_file_twice_and_empty_files_are_read_once_or_not_at_all() -> None:
    same = Path("/m/main.gguf")
    files = order_files(
        {"model_param": (same, 10), "embeddingsmodel": (same, 10), "lora": (Path("/e"), 0)}
    )
    assert files == [(same, 10)]
