"""The contract's smaller deviations, each through a real router with fake backends:
GET /v1/health answered by the router, a wrong method on a Kobold path in Kobold's shape,
form-encoded bodies on JSON routes refused with 415, llama-server's model path never leaked."""

from __future__ import annotations

import json

import pytest

from tests.support.harness import RouterHarness, chat

pytestmark = pytest.mark.timeout(60)
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


async def test_v1_health_is_answered_by_the_router(harness: RouterHarness) -> None:
    harness.model("alpha")
    client = await harness.start()
    r = await client.get("/v1/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert (await client.head("/v1/health")).status_code == 200
    assert harness.runtimes.spawn_count == 0  # never forwarded, never loads


async def test_a_wrong_method_on_a_kobold_path_is_405_in_kobolds_shape(
    harness: RouterHarness,
) -> None:
    client = await harness.start()
    r = await client.get("/api/v1/generate")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert set(r.json()) == {"detail"} and "POST" in r.json()["detail"]["msg"]


async def test_a_form_encoded_body_on_a_json_route_is_415(harness: RouterHarness) -> None:
    harness.model("alpha")
    client = await harness.start()
    body = json.dumps(chat("alpha"))
    r = await client.post("/v1/chat/completions", content=body, headers=FORM)
    assert r.status_code == 415, r.text
    assert "application/json" in r.json()["error"]["message"]
    assert harness.runtimes.spawn_count == 0
    # llama-server's own routes take bodies of any content type, as llama-server does.
    native = json.dumps({"model": "alpha", "prompt": "hi", "n_predict": 2})
    assert (await client.post("/completion", content=native, headers=FORM)).status_code == 200


async def test_llama_server_model_path_becomes_the_public_id(harness: RouterHarness) -> None:
    harness.model("alpha")
    harness.faults["llamacpp"] = "--native-model-path"
    client = await harness.start()
    body = {"model": "alpha", "prompt": "hi", "n_predict": 2}
    r = await client.post("/completion", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "alpha"
    streamed = await client.post("/completion", json={**body, "stream": True})
    assert '"model": "alpha"' in streamed.text or '"model":"alpha"' in streamed.text
    assert str(harness.models_dir) not in streamed.text
