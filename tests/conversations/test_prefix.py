"""The conversation library's pure parts (router/conversations/prefix.py): the digest chain,
the prefix match (longest wins, an edit never matches a later state) and the choice of what
to keep within the count and byte bounds."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from router.conversations import Candidate, choose_to_keep, matches, parse
from router.conversations.prefix import BLOCK, chain_of

texts = st.text(min_size=1, max_size=30)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": texts}),
    min_size=1,
    max_size=8,
)


def _chat(msgs: list[dict[str, str]], **extra: object) -> bytes:
    return json.dumps({"model": "m", "messages": msgs, "temperature": 0, **extra}).encode()


@given(st.lists(texts, min_size=1, max_size=10), st.data())
def test_a_prefix_of_the_units_has_a_prefix_of_the_chain(
    units: list[str], data: st.DataObject
) -> None:
    k = data.draw(st.integers(1, len(units)))
    assert chain_of(units[:k]) == chain_of(units)[:k]


@given(messages, messages)
def test_a_prompt_that_extends_a_conversation_matches_it(
    first: list[dict[str, str]], more: list[dict[str, str]]
) -> None:
    saved = parse("/v1/chat/completions", _chat(first))
    later = parse("/v1/chat/completions", _chat(first + more, max_tokens=9))
    assert saved is not None and later is not None
    assert matches(later.chain, len(saved.chain), saved.chain[-1])
    assert later.replay["messages"] == first + more  # what a replay renders, sampling apart


@given(messages, st.data())
def test_an_edited_earlier_message_never_matches_the_later_state(
    msgs: list[dict[str, str]], data: st.DataObject
) -> None:
    i = data.draw(st.integers(0, len(msgs) - 1))
    edited = [dict(m) for m in msgs]
    edited[i]["content"] += data.draw(texts)
    saved = parse("/v1/chat/completions", _chat(msgs))
    later = parse("/v1/chat/completions", _chat(edited))
    assert saved is not None and later is not None
    for length in range(i + 2, len(saved.chain) + 1):  # unit 0 is the template's settings
        assert not matches(later.chain, length, saved.chain[length - 1])
    assert matches(later.chain, i + 1, saved.chain[i])  # the part before the edit still does


def test_tools_and_template_settings_are_part_of_the_prefix() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    plain = parse("/v1/chat/completions", _chat(msgs))
    tooled = parse("/v1/chat/completions", _chat(msgs, tools=[{"type": "function"}]))
    assert plain is not None and tooled is not None
    assert plain.chain[0] != tooled.chain[0] and tooled.replay["tools"] == [{"type": "function"}]


@given(st.text(min_size=BLOCK, max_size=4 * BLOCK), st.text(max_size=BLOCK))
def test_a_completion_prompt_matches_at_its_last_whole_block(prompt: str, more: str) -> None:
    saved = parse("/completion", json.dumps({"prompt": prompt}).encode())
    later = parse("/v1/completions", json.dumps({"prompt": prompt + more}).encode())
    assert saved is not None and later is not None
    assert len(saved.chain) == 1 + len(prompt) // BLOCK
    assert matches(later.chain, len(saved.chain), saved.chain[-1])


def test_what_the_library_does_not_read() -> None:
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    for path, body in [
        ("/v1/embeddings", _chat([{"role": "user", "content": "hi"}])),
        ("/v1/chat/completions", b"not json"),
        ("/v1/chat/completions", _chat(image)),
        ("/v1/chat/completions", _chat([])),
        ("/completion", json.dumps({"prompt": [1, 2, 3]}).encode()),
        ("/completion", json.dumps({"prompt": "short"}).encode()),
    ]:
        assert parse(path, body) is None, (path, body)
    text_parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert parse("/v1/chat/completions", _chat(text_parts)) is not None


candidates = st.lists(
    st.builds(
        Candidate,
        id=st.text("abcdef", min_size=4, max_size=4),
        last_used=st.floats(0, 1000),
        tokens=st.integers(0, 5000),
    ),
    max_size=25,
    unique_by=lambda c: c.id,
)


@given(candidates, st.integers(0, 20), st.integers(0, 2_000_000), st.floats(1, 600))
def test_the_choice_keeps_the_most_recent_that_fit_within_both_bounds(
    cands: list[Candidate], count: int, budget: int, per_token: float
) -> None:
    kept = choose_to_keep(cands, count, budget, per_token)
    by_id = {c.id: c for c in cands}
    size = {c.id: int(c.tokens * per_token) for c in cands}
    assert len(kept) <= count and sum(size[i] for i in kept) <= budget
    assert len(set(kept)) == len(kept)
    # Exactly the greedy walk from the most recent: each passed-over one did not fit then.
    order = sorted(cands, key=lambda c: (-c.last_used, c.id))
    walked: list[str] = []
    for cand in order:
        if len(walked) == count:
            break
        if sum(size[i] for i in walked) + size[cand.id] <= budget:
            walked.append(cand.id)
    assert kept == walked
    assert [by_id[i].last_used for i in kept] == sorted(
        (by_id[i].last_used for i in kept), reverse=True
    )
