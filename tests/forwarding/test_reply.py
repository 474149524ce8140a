"""The pure half of forwarding: what a backend's answer becomes for the client (the default
rewrite, Ollama's translation) and the SSE encoder/parser. No processes, no sockets."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import cast

import pytest

from router.errors import BadGateway, BadRequest, RouterError
from router.forwarding import (
    ModelRewriter,
    Rewrite,
    SSEParser,
    encode_event,
    terminal_error_event,
)
from router.forwarding.proxy import _may_wait
from router.forwarding.reply import MAX_WHOLE_READ, WHOLE_BODY_MAX
from router.ollama import OllamaTranslation

T0 = 1_700_000_000_000_000_000
SSE = "text/event-stream"
CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'


def _drive(body: object, chunks: list[bytes]) -> bytes:
    return b"".join(body.feed(c) for c in chunks) + body.flush()  # type: ignore[attr-defined]


# ---- the default: the backend's own answer, model IDs rewritten -----------------------------


@pytest.mark.parametrize(
    ("content_type", "length", "identity", "whole", "streaming"),
    [
        ("application/json", 100, True, True, False),  # small: one write
        ("application/json", None, False, True, False),  # rewritten JSON is held whole
        ("application/json", MAX_WHOLE_READ + 1, False, False, False),  # too big: by line
        ("application/json", None, True, False, False),  # nothing to rewrite: streamed
        ("image/png", WHOLE_BODY_MAX + 1, False, False, False),
        (SSE, None, False, False, True),
        ("application/x-ndjson; charset=utf-8", 10, False, False, True),
    ],
)
def test_rewrite_reads_whole_only_what_must_or_cheaply_can_be(
    content_type: str, length: int | None, identity: bool, whole: bool, streaming: bool
) -> None:
    rewriter = ModelRewriter("pub", "pub" if identity else "local")
    reply = Rewrite(rewriter).reply(200, content_type, length)
    assert (reply.whole, reply.streaming, reply.same_length) == (whole, streaming, identity)
    assert reply.status == 200 and reply.content_type is None


def test_rewrite_whole_json_rewrites_across_chunk_cuts() -> None:
    reply = Rewrite(ModelRewriter("pub", "local")).reply(200, "application/json", None)
    raw = b'{"model": "local", "x": 1}'
    assert _drive(reply.body, [raw[:5], raw[5:13], raw[13:]]) == b'{"model": "pub", "x": 1}'


def test_terminal_error_in_each_stream_format() -> None:
    event = terminal_error_event(SSE, "gone")
    assert event is not None and event.startswith(b"event: error\ndata: ")
    assert json.loads(event.split(b"data: ", 1)[1])["error"]["code"] == 502
    assert terminal_error_event("application/x-ndjson", "gone") == b'{"error": "gone"}\n'
    assert terminal_error_event("application/octet-stream", "gone") is None


def test_sse_encoder_and_parser_agree() -> None:
    raw = encode_event({"a": "b\nc"}, "state") + b": comment\n\n" + encode_event([1])
    parser = SSEParser()
    events = [e for i in range(len(raw)) for e in parser.feed(raw[i : i + 1])] + parser.close()
    assert [(name, json.loads(data)) for name, data in events] == [
        ("state", {"a": "b\nc"}),
        ("", [1]),
    ]


# ---- Ollama: OpenAI answers in Ollama's shape ----------------------------------------------


def _ollama(op: str = "chat", **kw: object) -> OllamaTranslation:
    clock = itertools.count(T0 + 1000, 1000).__next__
    return OllamaTranslation(op, "pub", T0, clock=clock, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "raw", "kind", "out_status"),
    [
        (400, b'{"error": {"message": "bad sampler at /home/u/x", "code": 400}}', BadRequest, 400),
        (404, b'{"error": "no such model"}', BadRequest, 404),
        (500, b"<html>oops</html>", BadGateway, 502),
        (503, b'{"error": {"message": "Loading model"}}', BadGateway, 502),
    ],
)
def test_ollama_refusal_keeps_a_4xx_and_its_message(
    status: int, raw: bytes, kind: type[RouterError], out_status: int
) -> None:
    reply = _ollama().reply(status, "application/json", len(raw))
    assert reply.whole and reply.status == out_status
    with pytest.raises(kind) as caught:
        _drive(reply.body, [raw])
    assert caught.value.status == out_status and "/home/u" not in caught.value.message


def test_ollama_whole_answer_is_translated_at_flush() -> None:
    answer = {
        "choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    reply = _ollama().reply(200, "application/json", None)
    raw = json.dumps(answer).encode()
    assert reply.whole and reply.content_type == "application/json"
    assert reply.body.feed(raw[:10]) == b""
    out = json.loads(reply.body.feed(raw[10:]) + reply.body.flush())
    assert out["message"]["content"] == "hello" and out["done"] is True
    assert (out["prompt_eval_count"], out["eval_count"]) == (3, 1)


@pytest.mark.parametrize("raw", [b"{cut", b'{"choices": []}'])
def test_ollama_untranslatable_answer_is_a_bad_gateway(raw: bytes) -> None:
    reply = _ollama().reply(200, "application/json", None)
    with pytest.raises(BadGateway):
        _drive(reply.body, [raw])


def test_ollama_embeddings_are_truncated_as_asked() -> None:
    answer = {"data": [{"index": 0, "embedding": [3.0, 4.0, 12.0]}]}
    reply = _ollama("embed", dimensions=2).reply(200, "application/json", None)
    out = json.loads(_drive(reply.body, [json.dumps(answer).encode()]))
    assert out["embeddings"] == [[0.6, 0.8]]
    legacy = _ollama("embeddings").reply(200, "application/json", None)
    assert json.loads(_drive(legacy.body, [json.dumps(answer).encode()])) == {
        "embedding": [3.0, 4.0, 12.0]
    }


def test_ollama_stream_cut_by_the_backend_ends_with_one_error_record() -> None:
    reply = _ollama().reply(200, SSE, None)
    assert reply.streaming and not reply.whole and reply.content_type == "application/x-ndjson"
    first = reply.body.feed(CHUNK)
    assert json.loads(first)["message"]["content"] == "hi"
    end = reply.fail("the backend stopped mid-response: /srv/models/x.gguf")
    assert end is not None and json.loads(end) == {
        "error": "the backend stopped mid-response: x.gguf"
    }
    assert reply.fail("again") == b"" and reply.body.flush() == b""


def test_ollama_stream_already_closed_says_nothing_more() -> None:
    reply = _ollama("generate").reply(200, SSE, None)
    done = CHUNK.replace(b"null", b'"stop"') + b"data: [DONE]\n\n"
    records = [json.loads(line) for line in reply.body.feed(done).splitlines()]
    assert records[-1]["done"] is True
    assert reply.fail("cut after the end") == b""
    assert reply.body.feed(CHUNK) == b"" and reply.body.flush() == b""


def test_ollama_answer_to_a_stream_request_in_one_piece_is_one_object() -> None:
    # A backend may answer JSON where SSE was asked (an error, an old server): not NDJSON.
    reply = _ollama().reply(200, "application/json; charset=utf-8", 50)
    assert reply.whole and not reply.streaming
    assert reply.fail("x") is None


# ---- the send deadline --------------------------------------------------------------------


class _Buffer:
    """What an asyncio transport reports about its write buffer, and its watermarks."""

    def __init__(self, size: int) -> None:
        self.size = size

    def get_write_buffer_size(self) -> int:
        return self.size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return 16 * 1024, 64 * 1024


@pytest.mark.parametrize(
    ("buffered", "piece", "may_wait"),
    [
        (0, 1_000, False),  # the client keeps up: no timer
        (1, 10, True),  # it does not: every write gets the deadline
        (0, 100_000, True),  # one piece past the high-water mark waits on an empty buffer too
    ],
)
def test_the_send_deadline_covers_every_write_that_can_wait(
    buffered: int, piece: int, may_wait: bool
) -> None:
    transport = cast(asyncio.Transport, _Buffer(buffered))
    assert _may_wait(transport, b"x" * piece) is may_wait
