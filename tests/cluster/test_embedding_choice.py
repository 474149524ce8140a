"""The pure rotation behind selectorless embeddings (router/cluster/replicas.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.cluster import EmbeddingRuntime, choose_embedding_runtime

runtimes = st.lists(
    st.builds(EmbeddingRuntime, st.sampled_from(["m", "s1", "s2"]), st.sampled_from(["a", "b"])),
    max_size=8,
)


def test_none_loaded_is_none() -> None:
    assert choose_embedding_runtime([], 3) is None


@given(runtimes, st.integers(min_value=0, max_value=1000))
def test_a_rotation_visits_each_runtime_once(found: list[EmbeddingRuntime], start: int) -> None:
    unique = set(found)
    turn = [choose_embedding_runtime(found, start + i) for i in range(len(unique))]
    assert set(turn) == unique and len(turn) == len(unique)


def test_aliases_of_one_runtime_count_once() -> None:
    alias = [EmbeddingRuntime("s1", "a"), EmbeddingRuntime("s1", "a"), EmbeddingRuntime("m", "b")]
    picks = [choose_embedding_runtime(alias, t) for t in range(4)]
    assert [p.node_id for p in picks if p] == ["m", "s1", "m", "s1"]
