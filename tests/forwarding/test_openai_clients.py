"""The official `openai` client through the router against fake backends of each text family
(llama-server, KoboldCpp, vLLM): chat, streamed chat, completions, embeddings, tools and
structured output, each answered under the router-visible model ID."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from tests.support.harness import RouterHarness
from tests.support.proctree import survivors

MODES = ["llama_sdcpp", "kobold", "vllm"]


@pytest.fixture(params=MODES)
async def client(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[openai.AsyncOpenAI]:
    h = RouterHarness(tmp_path)
    mode = request.param
    h.model("chat-a", mode=mode)
    # An embedding config in the same family: llama-server --embedding, KoboldCpp's embeddings
    # model, or a vLLM pooling model.
    h.model("embed", mode=mode, embeddingsmodel="embed.gguf")
    await h.start()
    assert h.server is not None
    api = openai.AsyncOpenAI(
        base_url=str(h.server.make_url("/v1")), api_key="unused", max_retries=0
    )
    yield api
    await api.close()
    await h.close()
    assert await survivors() == []


MESSAGES = [{"role": "user", "content": "hello"}]


async def test_chat(client: openai.AsyncOpenAI) -> None:
    reply = await client.chat.completions.create(model="chat-a", messages=MESSAGES, max_tokens=4)
    assert reply.model == "chat-a"
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens == 4


async def test_streamed_chat(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="chat-a",
        messages=MESSAGES,
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert all(c.model == "chat-a" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


async def test_completions(client: openai.AsyncOpenAI) -> None:
    reply = await client.completions.create(model="chat-a", prompt="once", max_tokens=3)
    assert reply.model == "chat-a" and reply.choices[0].text


async def test_embeddings(client: openai.AsyncOpenAI) -> None:
    reply = await client.embeddings.create(model="embed", input=["a", "b"])
    assert reply.model == "embed"
    assert len(reply.data) == 2 and len(reply.data[0].embedding) > 0


async def test_tools(client: openai.AsyncOpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    reply = await client.chat.completions.create(
        model="chat-a",
        messages=MESSAGES,
        tools=tools,
        max_tokens=8,  # type: ignore[arg-type]
    )
    call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert reply.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"  # type: ignore[union-attr]


async def test_structured_output(client: openai.AsyncOpenAI) -> None:
    reply = await client.chat.completions.create(
        model="chat-a",
        messages=MESSAGES,
        max_tokens=8,
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "r",
                "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            },
        },
    )
    assert reply.choices[0].message.content == '{"ok": true}'


async def test_unknown_model_is_an_openai_404(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await client.chat.completions.create(model="nope", messages=MESSAGES)
    assert caught.value.body["message"] == 'model "nope" was not found'  # type: ignore[index]
