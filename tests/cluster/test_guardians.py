"""Guardian models: image requests for a text-only model answered by an assigned multimodal one."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.cluster.guardians import Assignment, carries_images, parse_assignment, resolve
from router.errors import BadRequest
from tests.support.harness import RouterHarness, read_sse, vision_model

IMAGE = "data:image/png;base64,iVBORw0KGgo="
URL = "/router/v1/site/guardian-models"


def openai_image_chat(model: str, **extra: Any) -> dict[str, Any]:
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": IMAGE}},
    ]
    return {"model": model, "messages": [{"role": "user", "content": parts}], **extra}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (openai_image_chat("m"), True),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}, True),
        ({"model": "m", "messages": [{"role": "user", "content": "x", "images": [IMAGE]}]}, True),
        ({"model": "m", "prompt": "x", "images": [IMAGE]}, True),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "image"}]}]}, True),
        ({"model": "m", "messages": [{"role": "user", "content": "x", "images": []}]}, False),
        ({"model": "m", "messages": [{"role": "user", "content": 'say "image_url" twice'}]}, False),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}, False),
    ],
)
def test_carries_images(body: dict[str, Any], expected: bool) -> None:
    assert carries_images(json.dumps(body).encode()) is expected


def test_not_json_carries_no_images() -> None:
    assert carries_images(b'{"images": [1') is False


_scopes = st.sampled_from(["model", "node", "cluster"])


@given(st.lists(st.tuples(_scopes, st.sampled_from(["n1", "n2"]), st.sampled_from(["a", "b"]))))
def test_the_most_specific_assignment_wins(keys: list[tuple[str, str, str]]) -> None:
    assignments = [
        Assignment(s, "" if s == "cluster" else n, m if s == "model" else "", "g", f"{s}-{n}-{m}")
        for s, n, m in keys
    ]
    found = resolve(assignments, "n1", "a")
    model = any(a.scope == "model" and a.node_id == "n1" and a.model_id == "a" for a in assignments)
    node = any(a.scope == "node" and a.node_id == "n1" for a in assignments)
    cluster = any(a.scope == "cluster" for a in assignments)
    if model:
        assert found is not None and found.scope == "model"
    elif node:
        assert found is not None and found.scope == "node"
    elif cluster:
        assert found is not None and found.scope == "cluster"
    else:
        assert found is None


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "galaxy", "guardian": {"model_id": "g"}},
        {"scope": "cluster", "model_id": "x", "guardian": {"model_id": "g"}},
        {"scope": "node", "model_id": "x", "guardian": {"model_id": "g"}},
        {"scope": "model", "guardian": {"model_id": "g"}},
        {"scope": "model", "model_id": "x"},
        {"scope": "model", "model_id": "x", "guardian": {"model_id": ""}},
        {"scope": "model", "model_id": ["x"], "guardian": {"model_id": "g"}},
    ],
)
def test_bad_assignments_are_refused(body: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        parse_assignment(body, "local")


async def test_an_image_chat_to_a_text_model_is_answered_by_its_guardian(
    harness: RouterHarness,
) -> None:
    harness.model("plain")
    vision_model(harness, "seer")
    vision_model(harness, "watcher")
    client = await harness.start()
    refused = await client.post("/v1/chat/completions", json=openai_image_chat("plain"))
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert "'plain'" in message and "guardian-models" in message
    # Not a multimodal model: refused as a guardian.
    bad = {"scope": "model", "model_id": "plain", "guardian": {"model_id": "plain"}}
    assert (await client.post(URL, json=bad)).status_code == 400
    ok = {"scope": "model", "model_id": "plain", "guardian": {"model_id": "seer"}}
    assert (await client.post(URL, json=ok)).status_code == 200
    listed = (await client.get(URL)).json()
    assert listed["assignments"] == [
        {
            "scope": "model",
            "node_id": "local",
            "model_id": "plain",
            "guardian": {"node_id": "local", "model_id": "seer"},
        }
    ]
    assert sorted(c["model_id"] for c in listed["candidates"]) == ["seer", "watcher"]
    answered = await client.post("/v1/chat/completions", json=openai_image_chat("plain"))
    assert answered.status_code == 200, answered.text
    assert answered.json()["model"] == "plain"
    assert answered.headers["x-fake-model"].endswith("seer.gguf")
    # Streaming, and Ollama's images field, go the same way.
    async with client.stream(
        "POST", "/v1/chat/completions", json=openai_image_chat("plain", stream=True)
    ) as r:
        assert r.headers["x-fake-model"].endswith("seer.gguf")
        events = await read_sse(r)
    assert events[-1].data == "[DONE]"
    assert all(
        json.loads(e.data)["model"] == "plain" for e in events[:-1] if e.data.startswith("{")
    )
    ollama = {
        "model": "plain",
        "stream": False,
        "messages": [{"role": "user", "content": "what?", "images": ["iVBORw0KGgo="]}],
    }
    reply = await client.post("/api/chat", json=ollama)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-fake-model"].endswith("seer.gguf") and reply.json()["model"] == "plain"
    # Without images the text model answers itself.
    text = {"model": "plain", "messages": [{"role": "user", "content": "hi"}]}
    plain = await client.post("/v1/chat/completions", json=text)
    assert plain.headers["x-fake-model"].endswith("plain.gguf")
    # Analytics keep both: the model asked for, and the guardian that answered.
    await client.post("/router/v1/site/analytics/flush")
    rows = _events(harness)
    assert ("plain", "seer") in rows and ("plain", None) in rows


async def test_scopes_model_then_node_then_cluster(harness: RouterHarness) -> None:
    harness.model("plain")
    for name in ("by-model", "by-node", "by-cluster"):
        vision_model(harness, name)
    client = await harness.start()
    for scope, guardian in (("cluster", "by-cluster"), ("node", "by-node"), ("model", "by-model")):
        body: dict[str, Any] = {"scope": scope, "guardian": {"model_id": guardian}}
        if scope == "model":
            body["model_id"] = "plain"
        assert (await client.post(URL, json=body)).status_code == 200

    async def answered_by() -> str:
        r = await client.post("/v1/chat/completions", json=openai_image_chat("plain"))
        assert r.status_code == 200, r.text
        return r.headers["x-fake-model"].rsplit("/", 1)[-1]

    assert await answered_by() == "by-model.gguf"
    assert (
        await client.delete(URL, params={"scope": "model", "model_id": "plain"})
    ).status_code == 200
    assert await answered_by() == "by-node.gguf"
    assert (await client.delete(URL, params={"scope": "node"})).status_code == 200
    assert await answered_by() == "by-cluster.gguf"
    assert (await client.delete(URL, params={"scope": "cluster"})).status_code == 200
    gone = await client.delete(URL, params={"scope": "cluster"})
    assert gone.status_code == 404
    assert (
        await client.post("/v1/chat/completions", json=openai_image_chat("plain"))
    ).status_code == 400


async def test_a_vision_model_reads_its_own_images(harness: RouterHarness) -> None:
    vision_model(harness, "seer")
    client = await harness.start()
    r = await client.post("/v1/chat/completions", json=openai_image_chat("seer"))
    assert r.status_code == 200 and r.headers["x-fake-model"].endswith("seer.gguf")


async def test_assignments_survive_a_restart(harness: RouterHarness) -> None:
    harness.model("plain")
    vision_model(harness, "seer")
    client = await harness.start()
    ok = {"scope": "model", "model_id": "plain", "guardian": {"model_id": "seer"}}
    assert (await client.post(URL, json=ok)).status_code == 200
    await harness.close()
    client = await harness.start()
    assert len((await client.get(URL)).json()["assignments"]) == 1


def _events(h: RouterHarness) -> list[tuple[str | None, str | None]]:
    with sqlite3.connect(h.tmp / "data" / "router.sqlite") as db:
        return list(db.execute("SELECT model, answered_by FROM analytics_events"))
