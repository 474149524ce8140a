"""Which headers cross the proxy (router/edge/headers.py): hop-by-hop ones, those `Connection`
names, the client's credentials and a caller's own names stay behind, every other header goes
on with its repeats; the drop sets are made once, whatever each request names."""

from __future__ import annotations

from multidict import CIMultiDict, CIMultiDictProxy

from router.edge import downstream_response_headers, upstream_request_headers


def test_a_request_keeps_its_end_to_end_headers_only() -> None:
    sent = CIMultiDict(
        [
            ("Host", "router:8080"),
            ("Connection", "keep-alive, X-Hop"),
            ("X-Hop", "1"),
            ("Authorization", "Bearer k"),
            ("X-Tensors-Model", "chat-a"),
            ("Accept", "a"),
            ("Accept", "b"),
            ("Content-Type", "application/json"),
        ]
    )
    for _ in range(2):  # the second call reuses the cached drop set
        out = upstream_request_headers(CIMultiDictProxy(sent), extra_drop=("X-Tensors-Model",))
        assert list(out.items()) == [
            ("Accept", "a"),
            ("Accept", "b"),
            ("Content-Type", "application/json"),
        ]
    plain = upstream_request_headers(CIMultiDictProxy(sent))  # no extra: the model stays
    assert plain.getall("X-Tensors-Model") == ["chat-a"] and "X-Hop" not in plain


def test_an_answer_drops_its_framing_and_the_headers_connection_names() -> None:
    got = CIMultiDict(
        [
            ("Content-Length", "3"),
            ("Server", "llama"),
            ("Connection", "X-Private"),
            ("X-Private", "1"),
            ("Content-Type", "application/json"),
        ]
    )
    out = downstream_response_headers(CIMultiDictProxy(got))
    assert list(out.items()) == [("Content-Type", "application/json")]
    got.popall("Connection")  # without Connection, X-Private is an end-to-end header
    assert "X-Private" in downstream_response_headers(CIMultiDictProxy(got))
