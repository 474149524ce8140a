"""The generated GGUF models served by the real llama-server: chat, streaming, completions and
embeddings. Random weights produce noise, so only the response shapes are checked."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

# The `llama_server` fixture (tests/real/conftest.py) yields a RunningServer; conftest modules are
# not importable by name under every pytest invocation, so the type is spelled loosely here.
RunningServer = Any
LlamaServerFactory = Callable[..., AbstractContextManager[RunningServer]]

pytestmark = [pytest.mark.real, pytest.mark.timeout(60)]

GEN = {"max_tokens": 8, "temperature": 0}
CHAT = [{"role": "user", "content": "Hello world, tell me a story."}]


def _post(server: RunningServer, route: str, body: dict[str, object]) -> dict[str, object]:
    response = httpx.post(server.base_url + route, json=body, timeout=30)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert isinstance(payload, dict)
    return payload


@pytest.mark.parametrize("name", ["chat-a", "chat-b"])
def test_chat_completion(
    llama_server: LlamaServerFactory, demo_text: dict[str, Path], name: str
) -> None:
    with llama_server(demo_text[name]) as server:
        assert server.ready_seconds < 20
        body = _post(server, "/v1/chat/completions", {"messages": CHAT, **GEN})
        # The response names the model file, so a test can tell which one answered.
        assert str(body["model"]).endswith(f"{name}.gguf")
        choices = body["choices"]
        assert isinstance(choices, list) and len(choices) == 1
        assert choices[0]["message"]["role"] == "assistant"
        assert isinstance(choices[0]["message"]["content"], str)
        assert choices[0]["finish_reason"] in {"length", "stop"}
        assert 1 <= body["usage"]["completion_tokens"] <= 8  # type: ignore[index]


def test_chat_template_is_used(
    llama_server: LlamaServerFactory, demo_text: dict[str, Path]
) -> None:
    with llama_server(demo_text["chat-a"]) as server:
        props = httpx.get(server.base_url + "/props", timeout=10).json()
        assert "<|im_start|>" in props["chat_template"]
        assert props["model_path"] == str(demo_text["chat-a"])
        body = _post(server, "/apply-template", {"messages": CHAT})
        assert body["prompt"] == (
            "<|im_start|>user\nHello world, tell me a story.<|im_end|>\n<|im_start|>assistant\n"
        )


def test_streamed_chat(llama_server: LlamaServerFactory, demo_text: dict[str, Path]) -> None:
    with llama_server(demo_text["chat-a"]) as server:
        payloads: list[bytes] = []
        request = {"messages": CHAT, "stream": True, **GEN}
        with httpx.stream(
            "POST", server.base_url + "/v1/chat/completions", json=request, timeout=30
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            # Bytes, not text: random weights can emit invalid UTF-8.
            for line in response.iter_raw():
                payloads.append(line)
        events = [
            line[len(b"data: ") :]
            for line in b"".join(payloads).split(b"\n")
            if line.startswith(b"data: ")
        ]
        assert events[-1].strip() == b"[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        assert len(chunks) >= 2
        assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] in {"length", "stop"}


def test_text_completion(llama_server: LlamaServerFactory, demo_text: dict[str, Path]) -> None:
    with llama_server(demo_text["chat-b"]) as server:
        body = _post(server, "/v1/completions", {"prompt": "Tell me a story", **GEN})
        choices = body["choices"]
        assert isinstance(choices, list) and isinstance(choices[0]["text"], str)
        assert body["usage"]["prompt_tokens"] >= 3  # type: ignore[index]
        assert body["usage"]["completion_tokens"] <= 8  # type: ignore[index]


@pytest.mark.parametrize(("name", "width"), [("chat-a", 64), ("embed", 32)])
def test_embeddings(
    llama_server: LlamaServerFactory, demo_text: dict[str, Path], name: str, width: int
) -> None:
    with llama_server(demo_text[name], "--embedding", "--pooling", "mean") as server:
        inputs = ["hello world", "tell me a story about the water"]
        body = _post(server, "/v1/embeddings", {"input": inputs})
        data = body["data"]
        assert isinstance(data, list) and [item["index"] for item in data] == [0, 1]
        vectors = [item["embedding"] for item in data]
        assert [len(v) for v in vectors] == [width, width]
        assert all(math.isfinite(x) for v in vectors for x in v)
        assert vectors[0] != vectors[1]
