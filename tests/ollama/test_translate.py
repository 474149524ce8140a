"""Ollama <-> OpenAI translation (router/ollama/requests.py, router/ollama/stream.py)."""

from __future__ import annotations

import base64
import itertools
import json
import math
from collections.abc import AsyncIterator, Iterable
from typing import Any

import ollama
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.errors import BadGateway, BadRequest
from router.ollama import NdjsonStream
from router.ollama.requests import (
    chat_request,
    embed_request,
    generate_request,
    is_load_request,
    load_response,
)
from router.ollama.responses import (
    chat_response,
    done_reason,
    embed_response,
    generate_response,
    legacy_embedding_response,
    metrics,
    rfc3339,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 20).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\0" * 20).decode()
GIF = base64.b64encode(b"GIF89a" + b"\0" * 10).decode()
WEBP = base64.b64encode(b"RIFF\0\0\0\0WEBPVP8 " + b"\0" * 10).decode()

METRIC_KEYS = {
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
}
# notes/backends.md section 7: final records (generate's `context` is never sent, see docs).
CHAT_FINAL_KEYS = {"model", "created_at", "message", "done", "done_reason"} | METRIC_KEYS
GENERATE_FINAL_KEYS = {"model", "created_at", "response", "done", "done_reason"} | METRIC_KEYS
CHAT_CHUNK_KEYS = {"model", "created_at", "message", "done"}
GENERATE_CHUNK_KEYS = {"model", "created_at", "response", "done"}
EMBED_KEYS = {"model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"}

USER = [{"role": "user", "content": "hi"}]


def chat(**body: Any) -> dict[str, Any]:
    path, out = chat_request({"model": "pub", "messages": USER} | body, "local")
    assert path == "/v1/chat/completions"
    return out


# ---------------------------------------------------------------------------- requests


def test_chat_defaults_to_streaming_with_usage() -> None:
    out = chat()
    assert out == {
        "model": "local",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_chat_without_streaming_asks_for_no_stream_options() -> None:
    out = chat(stream=False, keep_alive="5m")
    assert out["stream"] is False
    assert "stream_options" not in out and "keep_alive" not in out


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("temperature", 0.2, {"temperature": 0.2}),
        ("top_k", 40, {"top_k": 40}),
        ("top_k", 40.0, {"top_k": 40}),
        ("top_p", 0.9, {"top_p": 0.9}),
        ("min_p", 0.05, {"min_p": 0.05}),
        ("seed", 7, {"seed": 7}),
        ("num_predict", 128, {"max_tokens": 128}),
        ("num_predict", -1, {}),
        ("num_predict", 0, {}),
        ("stop", ["\n", "User:"], {"stop": ["\n", "User:"]}),
        ("stop", "END", {"stop": ["END"]}),
        ("repeat_penalty", 1.1, {"repeat_penalty": 1.1, "repetition_penalty": 1.1}),
        ("repeat_last_n", 64, {"repeat_last_n": 64}),
        ("presence_penalty", 0.5, {"presence_penalty": 0.5}),
        ("frequency_penalty", 0.25, {"frequency_penalty": 0.25}),
        ("num_ctx", 8192, {}),
        ("num_gpu", 99, {}),
    ],
)
def test_options_map_to_openai_fields(option: str, value: Any, expected: dict) -> None:
    out = chat(options={option: value}, stream=False)
    base = {"model", "messages", "stream"}
    assert {k: v for k, v in out.items() if k not in base} == expected


@pytest.mark.parametrize(
    "options",
    [{"temperature": "hot"}, {"top_k": True}, {"seed": float("nan")}, {"stop": [1]}, [1]],
)
def test_badly_typed_options_are_refused(options: Any) -> None:
    with pytest.raises(BadRequest):
        chat(options=options)


def test_format_json_and_schema() -> None:
    assert chat(format="json")["response_format"] == {"type": "json_object"}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert chat(format=schema)["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "format", "schema": schema},
    }
    assert "response_format" not in chat(format="")


@pytest.mark.parametrize("fmt", ["yaml", 3, ["json"], True])
def test_unknown_format_is_refused(fmt: Any) -> None:
    with pytest.raises(BadRequest) as err:
        chat(format=fmt)
    assert err.value.param == "format"


@pytest.mark.parametrize(
    ("think", "kwargs"),
    [
        (True, {"enable_thinking": True}),
        (False, {"enable_thinking": False}),
        ("high", {"enable_thinking": True, "reasoning_effort": "high"}),
    ],
)
def test_think_becomes_template_kwargs(think: Any, kwargs: dict) -> None:
    assert chat(think=think)["chat_template_kwargs"] == kwargs


def test_bad_think_is_refused() -> None:
    with pytest.raises(BadRequest):
        chat(think="extreme")


def test_images_become_data_url_parts_by_magic() -> None:
    messages = [{"role": "user", "content": "what?", "images": [PNG, JPEG, GIF, WEBP]}]
    content = chat(messages=messages)["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "what?"}
    urls = [part["image_url"]["url"] for part in content[1:]]
    assert [u.split(";")[0] for u in urls] == [
        "data:image/png",
        "data:image/jpeg",
        "data:image/gif",
        "data:image/webp",
    ]
    assert urls[0] == f"data:image/png;base64,{PNG}"


@pytest.mark.parametrize(
    "images", [["not base64!"], [base64.b64encode(b"BM plain bitmap").decode()], "abc", [3]]
)
def test_bad_images_are_refused(images: Any) -> None:
    with pytest.raises(BadRequest):
        chat(messages=[{"role": "user", "content": "x", "images": images}])


def test_images_only_on_user_messages() -> None:
    with pytest.raises(BadRequest):
        chat(messages=[{"role": "assistant", "content": "x", "images": [PNG]}])


def test_tools_pass_through_and_history_arguments_become_strings() -> None:
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {}}}]
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "thinking": "need the tool",
            "tool_calls": [
                {"function": {"name": "time", "arguments": {}}},
                {"function": {"name": "weather", "arguments": {"city": "Oslo"}}},
            ],
        },
        {"role": "tool", "content": "sunny", "tool_name": "weather"},
        {"role": "tool", "content": "noon"},
    ]
    out = chat(messages=messages, tools=tools)
    assert out["tools"] == tools
    assistant = out["messages"][1]
    assert assistant["reasoning_content"] == "need the tool"
    assert assistant["tool_calls"] == [
        {"id": "call_1_0", "type": "function", "function": {"name": "time", "arguments": "{}"}},
        {
            "id": "call_1_1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
        },
    ]
    assert out["messages"][2] == {
        "role": "tool",
        "content": "sunny",
        "name": "weather",
        "tool_call_id": "call_1_1",
    }
    assert out["messages"][3]["tool_call_id"] == "call_1_0"


def test_tool_history_keeps_given_ids() -> None:
    messages = [
        {"role": "assistant", "tool_calls": [{"id": "c9", "function": {"name": "f"}}]},
        {"role": "tool", "content": "r", "tool_call_id": "c9"},
    ]
    out = chat(messages=messages)["messages"]
    assert out[0]["tool_calls"][0]["id"] == "c9"
    assert out[0]["content"] == ""
    assert out[1]["tool_call_id"] == "c9"


@pytest.mark.parametrize(
    "body",
    [
        {"suffix": "}"},
        {"template": "{{ .Prompt }}"},
        {"context": [1, 2, 3]},
        {"messages": "hi"},
        {"messages": []},
        {"messages": ["hi"]},
        {"messages": [{"content": "no role"}]},
        {"messages": [{"role": 1, "content": "x"}]},
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"messages": [{"role": "user", "content": ["parts"]}]},
        {"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]},
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}
            ]
        },
        {"tools": {"type": "function"}},
        {"stream": "yes"},
    ],
)
def test_chat_refusals(body: dict) -> None:
    with pytest.raises(BadRequest):
        chat_request({"model": "m", "messages": USER} | body, "local")


def test_empty_context_is_not_a_refusal() -> None:
    assert chat(context=[], suffix="")["messages"]


def test_chat_refuses_non_object_body() -> None:
    with pytest.raises(BadRequest):
        chat_request([1, 2], "local")


def test_generate_prompt_with_system_becomes_chat() -> None:
    body = {"model": "pub", "prompt": "Why?", "system": "Be brief.", "images": [PNG], "think": True}
    path, out = generate_request(body, "local")
    assert path == "/v1/chat/completions"
    assert out["messages"][0] == {"role": "system", "content": "Be brief."}
    assert out["messages"][1]["role"] == "user"
    assert out["messages"][1]["content"][0] == {"type": "text", "text": "Why?"}
    assert out["messages"][1]["content"][1]["image_url"]["url"].startswith("data:image/png")
    assert out["chat_template_kwargs"] == {"enable_thinking": True}
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}


def test_generate_raw_goes_to_completions_as_is() -> None:
    body = {
        "model": "pub",
        "prompt": "<s>[INST] x [/INST]",
        "raw": True,
        "system": "ignored",
        "think": True,
        "format": "json",
        "options": {"num_predict": 5},
        "stream": False,
    }
    path, out = generate_request(body, "local")
    assert path == "/v1/completions"
    assert out == {
        "model": "local",
        "prompt": "<s>[INST] x [/INST]",
        "stream": False,
        "max_tokens": 5,
        "response_format": {"type": "json_object"},
        "json_schema": {"type": "object"},
    }


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "x", "suffix": "y"},
        {"prompt": "x", "template": "t"},
        {"prompt": "x", "context": [1]},
        {"prompt": "x", "raw": True, "images": [PNG]},
        {"prompt": "x", "raw": "yes"},
        {"prompt": "x", "system": 5},
        {"prompt": 5},
        {"prompt": ""},
        {"prompt": "x", "format": "xml"},
    ],
)
def test_generate_refusals(body: dict) -> None:
    with pytest.raises(BadRequest):
        generate_request(body, "local")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"input": "a"}, "a"),
        ({"input": ["a", "b"]}, ["a", "b"]),
        ({"prompt": "legacy"}, "legacy"),
        ({"input": "a", "dimensions": 4, "truncate": False, "options": {"x": 1}}, "a"),
    ],
)
def test_embed_request(body: dict, expected: Any) -> None:
    path, out = embed_request({"model": "pub"} | body, "local")
    assert path == "/v1/embeddings"
    assert out == {"model": "local", "input": expected, "encoding_format": "float"}


@pytest.mark.parametrize(
    "body", [{}, {"input": []}, {"input": [1]}, {"input": 3}, {"input": "a", "dimensions": 0}]
)
def test_embed_refusals(body: dict) -> None:
    with pytest.raises(BadRequest):
        embed_request(body, "local")


def test_load_requests_are_recognised_and_answered() -> None:
    assert is_load_request("chat", {"model": "m"})
    assert is_load_request("chat", {"model": "m", "messages": []})
    assert not is_load_request("chat", {"model": "m", "messages": USER})
    assert is_load_request("generate", {"model": "m", "prompt": "", "keep_alive": 0})
    assert not is_load_request("generate", {"model": "m", "prompt": "x"})
    assert is_load_request("embed", {"model": "m", "input": []})
    assert not is_load_request("embed", {"model": "m", "prompt": "legacy"})
    assert is_load_request("embeddings", {"model": "m"})
    record = load_response("chat", "pub", 0)
    assert record["done_reason"] == "load" and record["message"]["content"] == ""
    ollama.ChatResponse.model_validate(record)
    ollama.GenerateResponse.model_validate(load_response("generate", "pub", 0))
    assert load_response("embed", "pub", 0) == {"model": "pub", "embeddings": []}
    assert load_response("embeddings", "pub", 0) == {"embedding": []}


# ---------------------------------------------------------------------------- responses

T0 = 1_700_000_000_000_000_000


def openai_chat(message: dict, finish: str = "stop", **extra: Any) -> dict:
    return {
        "id": "x",
        "object": "chat.completion",
        "model": "local",
        "choices": [
            {"index": 0, "message": {"role": "assistant"} | message, "finish_reason": finish}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 30, "total_tokens": 40},
    } | extra


def test_rfc3339_is_utc_with_fraction() -> None:
    assert rfc3339(T0 + 123_456_789) == "2023-11-14T22:13:20.123456Z"


def test_chat_response_shape_and_values() -> None:
    out = chat_response(openai_chat({"content": "Hello"}), "pub", T0, T0 + 4_000_000_000)
    assert set(out) == CHAT_FINAL_KEYS
    assert out["model"] == "pub"
    assert out["message"] == {"role": "assistant", "content": "Hello"}
    assert out["done"] is True and out["done_reason"] == "stop"
    assert out["total_duration"] == 4_000_000_000
    assert (out["prompt_eval_count"], out["eval_count"]) == (10, 30)
    # no timings: the wall time is shared by token count
    assert out["prompt_eval_duration"] == 1_000_000_000
    assert out["eval_duration"] == 3_000_000_000
    ollama.ChatResponse.model_validate(out)


def test_chat_response_thinking_tool_calls_and_timings() -> None:
    message = {
        "content": None,
        "reasoning_content": "hmm",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}},
        ],
    }
    timings = {"prompt_n": 9, "prompt_ms": 12.5, "predicted_n": 3, "predicted_ms": 250.0}
    raw = openai_chat(message, "tool_calls", timings=timings)
    out = chat_response(raw, "pub", T0, T0 + 10**9, load_ns=10**8)
    assert out["message"] == {
        "role": "assistant",
        "content": "",
        "thinking": "hmm",
        "tool_calls": [
            {"id": "c1", "function": {"name": "f", "arguments": {"a": 1}}},
            {"id": "c2", "function": {"name": "g", "arguments": {}}},
        ],
    }
    assert out["done_reason"] == "stop"
    assert out["load_duration"] == 10**8
    assert out["prompt_eval_duration"] == 12_500_000
    assert out["eval_duration"] == 250_000_000
    parsed = ollama.ChatResponse.model_validate(out)
    assert parsed.message.tool_calls[0].function.arguments == {"a": 1}


@pytest.mark.parametrize("args", ["[1, 2]", "{broken", 5])
def test_unparseable_tool_arguments_are_a_gateway_error(args: Any) -> None:
    raw = openai_chat({"tool_calls": [{"function": {"name": "f", "arguments": args}}]})
    with pytest.raises(BadGateway):
        chat_response(raw, "pub", T0, T0)


@pytest.mark.parametrize("raw", [{}, {"choices": []}, {"choices": ["x"]}, []])
def test_answer_without_choices_is_a_gateway_error(raw: Any) -> None:
    with pytest.raises(BadGateway):
        chat_response(raw, "pub", T0, T0)


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "stop"),
        (None, "stop"),
        ("abort", "abort"),
    ],
)
def test_done_reason_mapping(finish: Any, reason: str) -> None:
    assert done_reason(finish) == reason


def test_generate_response_from_chat_and_from_completions() -> None:
    out = generate_response(
        openai_chat({"content": "42", "reasoning": "think"}, "length"), "pub", T0, T0 + 5
    )
    assert set(out) == GENERATE_FINAL_KEYS | {"thinking"}
    assert (out["response"], out["thinking"], out["done_reason"]) == ("42", "think", "length")
    ollama.GenerateResponse.model_validate(out)
    completion = {"choices": [{"index": 0, "text": " done", "finish_reason": "stop"}]}
    out = generate_response(completion, "pub", T0, T0 + 5)
    assert set(out) == GENERATE_FINAL_KEYS
    assert out["response"] == " done"
    assert out["prompt_eval_count"] == 0 and out["eval_duration"] == 5


def test_metrics_split_at_first_token_and_clamp_load() -> None:
    m = metrics(None, None, 0, 100, load_ns=20, first_token_ns=50)
    assert m == {
        "total_duration": 100,
        "load_duration": 20,
        "prompt_eval_count": 0,
        "prompt_eval_duration": 30,
        "eval_count": 0,
        "eval_duration": 50,
    }
    assert metrics(None, None, 0, 10, load_ns=99)["load_duration"] == 10


def test_embed_response_shape_order_and_dimensions() -> None:
    raw = {
        "data": [
            {"object": "embedding", "index": 1, "embedding": [0.0, 1.0, 0.0]},
            {"object": "embedding", "index": 0, "embedding": [3.0, 4.0, 12.0]},
        ],
        "usage": {"prompt_tokens": 6, "total_tokens": 6},
    }
    out = embed_response(raw, "pub", started_ns=T0, now_ns=T0 + 7)
    assert set(out) == EMBED_KEYS
    assert out["embeddings"] == [[3.0, 4.0, 12.0], [0.0, 1.0, 0.0]]
    assert (out["model"], out["prompt_eval_count"], out["total_duration"]) == ("pub", 6, 7)
    ollama.EmbedResponse.model_validate(out)
    cut = embed_response(raw, "pub", dimensions=2)["embeddings"][0]
    assert cut == pytest.approx([0.6, 0.8])
    legacy = legacy_embedding_response(raw)
    assert legacy == {"embedding": [3.0, 4.0, 12.0]}
    ollama.EmbeddingsResponse.model_validate(legacy)


@pytest.mark.parametrize("raw", [{}, {"data": []}, {"data": [{"embedding": ["x"]}]}])
def test_bad_embedding_answers_are_gateway_errors(raw: Any) -> None:
    with pytest.raises(BadGateway):
        embed_response(raw, "pub")


# ---------------------------------------------------------------------------- streaming


def sse(obj: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return head + b"data: " + data + b"\n\n"


def delta(content: str | None = None, finish: str | None = None, **extra: Any) -> bytes:
    d: dict[str, Any] = dict(extra)
    if content is not None:
        d["content"] = content
    return sse(
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": d, "finish_reason": finish}],
        }
    )


USAGE = sse(
    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}
)
DONE = b"data: [DONE]\n\n"
HAPPY = [delta(role="assistant"), delta("Hel"), delta("lo"), delta(finish="stop"), USAGE, DONE]


async def agen(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def run(chunks: Iterable[bytes], kind: str = "chat") -> list[dict[str, Any]]:
    """The records the proxy writes when it feeds the chunks to the stream transform."""
    clock = itertools.count(T0 + 1000, 1000).__next__
    stream = NdjsonStream(kind, "pub", T0, clock=clock)  # type: ignore[arg-type]
    written = [stream.feed(chunk) async for chunk in agen(chunks)] + [stream.flush()]
    body = b"".join(written)
    assert body.endswith(b"\n") and all(w.endswith(b"\n") for w in written if w)
    return [json.loads(line) for line in body.split(b"\n")[:-1]]


async def test_stream_records_and_final_with_usage() -> None:
    records = await run(HAPPY)
    assert [r["message"]["content"] for r in records] == ["Hel", "lo", ""]
    for record in records[:-1]:
        assert set(record) == CHAT_CHUNK_KEYS and record["done"] is False
        assert record["model"] == "pub"
        ollama.ChatResponse.model_validate(record)
    final = records[-1]
    assert set(final) == CHAT_FINAL_KEYS
    assert final["done"] is True and final["done_reason"] == "stop" and final["model"] == "pub"
    assert (final["prompt_eval_count"], final["eval_count"]) == (5, 2)
    # clock ticks 1000 ns per reading: first token at the first reading
    assert final["prompt_eval_duration"] == 1000
    assert final["total_duration"] == final["prompt_eval_duration"] + final["eval_duration"]
    ollama.ChatResponse.model_validate(final)


async def test_stream_split_at_every_byte_gives_the_same_records() -> None:
    whole = b"".join(HAPPY)
    expected = [
        {k: v for k, v in r.items() if "duration" not in k and k != "created_at"}
        for r in await run([whole])
    ]
    split = await run([whole[i : i + 1] for i in range(len(whole))])
    assert [
        {k: v for k, v in r.items() if "duration" not in k and k != "created_at"} for r in split
    ] == expected


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
async def test_stream_any_chunking_gives_the_same_text(cuts: list[int]) -> None:
    whole = b"".join(
        [delta("é€"), delta("😀 x", reasoning_content="r"), delta(finish="stop"), DONE]
    )
    bounds = sorted({c % (len(whole) + 1) for c in cuts} | {0, len(whole)})
    chunks = [whole[a:b] for a, b in itertools.pairwise(bounds)]
    records = await run(chunks)
    assert "".join(r["message"]["content"] for r in records) == "é€😀 x"
    assert records[1]["message"]["thinking"] == "r"
    assert records[-1]["done"] is True


async def test_stream_with_crlf_comments_and_llama_timings() -> None:
    final_chunk = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "timings": {"prompt_n": 4, "prompt_ms": 2.0, "predicted_n": 1, "predicted_ms": 3.0},
    }
    chunks = [b": ping\r\n\r\n", delta("a").replace(b"\n", b"\r\n"), sse(final_chunk), DONE]
    records = await run(chunks)
    final = records[-1]
    assert final["done_reason"] == "length"
    assert (final["prompt_eval_duration"], final["eval_duration"]) == (2_000_000, 3_000_000)
    assert (final["prompt_eval_count"], final["eval_count"]) == (4, 1)


async def test_stream_invalid_utf8_in_content_is_replaced() -> None:
    bad = (
        b'data: {"choices":[{"index":0,"delta":{"content":"a\xff\xfeb"},"finish_reason":null}]}\n\n'
    )
    records = await run([bad, delta(finish="stop"), DONE])
    assert records[0]["message"]["content"] == "a\ufffd\ufffdb"


async def test_stream_tool_calls_are_assembled_into_one_record() -> None:
    pieces = [
        delta(
            tool_calls=[
                {
                    "index": 0,
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": ""},
                }
            ]
        ),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '"Oslo"}'}}]),
        delta(finish="tool_calls"),
        USAGE,
        DONE,
    ]
    records = await run(pieces)
    assert len(records) == 2
    assert records[0]["done"] is False
    assert records[0]["message"]["tool_calls"] == [
        {"id": "c1", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}
    ]
    assert records[1]["done_reason"] == "stop"
    ollama.ChatResponse.model_validate(records[0])


async def test_stream_tool_call_with_bad_arguments_ends_in_error() -> None:
    pieces = [
        delta(tool_calls=[{"index": 0, "function": {"name": "f", "arguments": "{nope"}}]),
        delta(finish="tool_calls"),
        DONE,
    ]
    records = await run(pieces)
    assert list(records[-1]) == ["error"]


@pytest.mark.parametrize(
    "error_event",
    [
        sse({"error": {"message": "context overflow at /home/u/models/x.gguf", "code": 400}}),
        sse({"message": "boom"}, event="error"),
        b'error: {"error": {"code": 500, "message": "slot died"}}\n\n',
        sse({"error": "plain"}),
    ],
)
async def test_stream_error_event_becomes_one_error_record_and_ends(error_event: bytes) -> None:
    records = await run([delta("partial"), error_event, delta("never"), DONE])
    assert records[0]["message"]["content"] == "partial"
    assert len(records) == 2
    assert list(records[1]) == ["error"]
    assert records[1]["error"]
    assert "/home/u" not in records[1]["error"]


async def test_truncated_stream_ends_with_an_error_record() -> None:
    records = await run([delta("Hel"), delta("lo")[:20]])
    assert records[0]["message"]["content"] == "Hel"
    assert list(records[-1]) == ["error"]
    assert "ended before" in records[-1]["error"]


async def test_empty_stream_ends_with_an_error_record() -> None:
    assert list((await run([]))[0]) == ["error"]


async def test_unreadable_event_ends_with_an_error_record() -> None:
    records = await run([sse(b"{not json"), delta("x")])
    assert list(records[-1]) == ["error"] and len(records) == 1


async def test_finished_stream_without_done_marker_still_closes() -> None:
    records = await run(
        [delta("x"), delta(finish="stop", **{})[:-1]]
    )  # last event lacks its blank line
    assert records[-1]["done"] is True


async def test_generate_stream_from_completions_and_from_chat() -> None:
    text_chunks = [
        sse({"choices": [{"index": 0, "text": "4", "finish_reason": None}]}),
        sse({"choices": [{"index": 0, "text": "2", "finish_reason": "stop"}]}),
        DONE,
    ]
    records = await run(text_chunks, kind="generate")
    assert [r["response"] for r in records] == ["4", "2", ""]
    assert set(records[0]) == GENERATE_CHUNK_KEYS
    assert set(records[-1]) == GENERATE_FINAL_KEYS
    for record in records:
        ollama.GenerateResponse.model_validate(record)
    chat_chunks = [delta(reasoning_content="why"), delta("ok", finish="stop"), DONE]
    records = await run(chat_chunks, kind="generate")
    assert records[0] == records[0] | {"response": "", "thinking": "why", "done": False}
    assert records[1]["response"] == "ok"


# ---------------------------------------------------------------------------- robustness

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
# Bodies shaped like Ollama requests reach the deeper checks more often than arbitrary JSON.
message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "tool", "system"]) | json_values,
        "content": st.text(max_size=8) | json_values,
        "images": st.lists(st.sampled_from([PNG, JPEG, "!!"]) | json_values, max_size=2)
        | json_values,
        "tool_calls": st.lists(
            st.fixed_dictionaries({}, optional={"id": json_values, "function": json_values}),
            max_size=2,
        )
        | json_values,
        "tool_name": json_values,
        "thinking": json_values,
    },
)
shaped = st.fixed_dictionaries(
    {},
    optional={
        "messages": st.lists(message, max_size=3) | json_values,
        "prompt": st.text(max_size=8) | json_values,
        "input": json_values,
        "options": st.dictionaries(
            st.sampled_from(["temperature", "top_k", "num_predict", "stop", "seed", "x"]),
            json_values,
        )
        | json_values,
        "format": st.sampled_from(["json", "", {"type": "object"}]) | json_values,
        "think": st.sampled_from([True, "low"]) | json_values,
        "raw": json_values,
        "system": json_values,
        "stream": json_values,
        "tools": json_values,
        "images": json_values,
        "dimensions": json_values,
    },
)


# Mostly valid bodies with one odd field, so the success path is exercised too.
plausible = st.fixed_dictionaries(
    {
        "messages": st.lists(
            st.fixed_dictionaries(
                {
                    "role": st.sampled_from(["user", "assistant", "tool"]),
                    "content": st.text(max_size=8),
                },
                optional={
                    "images": st.lists(st.sampled_from([PNG, WEBP]), max_size=1),
                    "tool_calls": st.lists(
                        st.fixed_dictionaries(
                            {"function": st.fixed_dictionaries({"name": st.text(max_size=4)})},
                            optional={"id": json_values},
                        ),
                        max_size=2,
                    ),
                    "tool_name": json_values,
                    "thinking": json_values,
                },
            ),
            min_size=1,
            max_size=3,
        ),
        "prompt": st.text(min_size=1, max_size=8),
        "input": st.text(min_size=1, max_size=8) | st.lists(st.text(max_size=4), min_size=1),
    },
    optional={
        "options": st.dictionaries(
            st.sampled_from(["temperature", "top_k", "num_predict", "stop", "seed"]),
            st.integers() | st.floats(allow_nan=False, allow_infinity=False),
        ),
        "format": st.sampled_from(["json", "", {"type": "object"}]),
        "think": st.sampled_from([True, False, "low"]),
        "raw": st.booleans(),
        "stream": st.booleans(),
        "odd": json_values,
    },
)


@settings(max_examples=400, deadline=None)
@given(body=json_values | shaped | plausible)
def test_arbitrary_bodies_raise_only_bad_request(body: Any) -> None:
    for translate in (chat_request, generate_request, embed_request):
        try:
            path, out = translate(body, "local")
        except BadRequest:
            continue
        assert path.startswith("/v1/")
        assert out["model"] == "local"
        json.dumps(out, allow_nan=False)  # the body we send is valid JSON


def test_floats_in_metrics_never_overflow() -> None:
    timings = {"prompt_ms": float("inf"), "predicted_ms": 1.0}
    m = metrics({"prompt_tokens": 1}, timings, 0, 10)
    assert all(isinstance(v, int) and not math.isnan(v) for v in m.values())
