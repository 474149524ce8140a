"""Model IDs rewritten in bodies as bytes (router/forwarding/rewrite.py); the patterns and
replacement templates are built once per name and shared by every request's rewriter."""

from __future__ import annotations

from router.forwarding import ModelRewriter


def test_ids_are_rewritten_both_ways_by_every_rewriter_of_the_same_names() -> None:
    for _ in range(2):  # the second rewriter reuses the first one's patterns
        r = ModelRewriter('we"ird\\name', "local-id")
        assert r.request_body(b'{"model": "we\\"ird\\\\name", "x": 1}') == (
            b'{"model": "local-id", "x": 1}'
        )
        assert r.response_body(b'{"model":"local-id","n":2}') == (
            b'{"model":"we\\"ird\\\\name","n":2}'
        )


def test_a_wildcard_local_name_is_rewritten_in_answers_only() -> None:
    r = ModelRewriter("chat-a", "koboldcpp/*")
    assert r.request_body(b'{"model": "chat-a"}') == b'{"model": "chat-a"}'
    assert r.response_body(b'{"model": "koboldcpp/chat-a.gguf"}') == b'{"model": "chat-a"}'


def test_the_same_name_on_both_sides_costs_nothing() -> None:
    r = ModelRewriter("chat-a", "chat-a")
    assert r.identity
    body = b'{"model": "chat-a"}'
    assert r.request_body(body) is body and r.response_body(body) is body
