"""The tests' SSE reader (tests/support/harness.py `read_sse`) reads a stream as a client does:
an event counts once its blank line arrived, in whatever pieces the bytes came, and an event
the stream never terminated is dropped, so a stream test cannot pass on an unterminated error."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from tests.support.harness import read_sse


class Pieces(httpx.AsyncByteStream):
    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def events_of(*chunks: bytes) -> list[tuple[str, str]]:
    response = httpx.Response(200, stream=Pieces(*chunks))
    return [(e.event, e.data) for e in await read_sse(response)]


async def test_events_split_anywhere_are_read_whole() -> None:
    body = b'data: {"a": 1}\n\nevent: error\ndata: one\ndata: two\n\ndata: [DONE]\n\n'
    whole = await events_of(body)
    assert whole == [("message", '{"a": 1}'), ("error", "one\ntwo"), ("message", "[DONE]")]
    assert await events_of(*(body[i : i + 3] for i in range(0, len(body), 3))) == whole
    assert await events_of(body.replace(b"\n", b"\r\n")) == whole


async def test_an_unterminated_last_event_is_dropped() -> None:
    ok = b'data: {"a": 1}\n\n'
    error = b'event: error\ndata: {"error": {"type": "upstream_error"}}'
    assert await events_of(ok, error) == [("message", '{"a": 1}')]
    assert await events_of(ok, error + b"\n") == [("message", '{"a": 1}')]
    assert await events_of(ok, error + b"\n\n") == [
        ("message", '{"a": 1}'),
        ("error", '{"error": {"type": "upstream_error"}}'),
    ]
