"""Scoped keys end to end on a real router with fake backends: the admin API, auth with a
scoped key, admission (403 outside the model list, 429 over the quota), revocation, model
lists filtered by key, per-key analytics and metrics, and no secret on disk or in the logs."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from router.appkeys import STORE
from router.config import Settings
from tests.support.harness import RouterHarness, chat, read_sse

ADMIN = "adm-scoped-keys-test-51c0e2"


def secure(harness: RouterHarness) -> Settings:
    base = harness.settings()
    return base.model_copy(
        update={
            "security": base.security.model_copy(update={"profile": "secure"}),
            "auth": base.auth.model_copy(update={"admin_keys": (ADMIN,)}),
        }
    )


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    r = await client.post("/router/v1/keys", json=body, headers=bearer(ADMIN))
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.fixture
async def client(harness: RouterHarness) -> httpx.AsyncClient:
    for model_id in ("chat-a", "chat-b", "team-x"):
        harness.model(model_id)
    return await harness.start(secure(harness))


async def test_creation_shows_the_secret_once_and_the_key_works(
    client: httpx.AsyncClient, harness: RouterHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    made = await create(client, name="agent", models=["chat-a"], priority="batch")
    secret = made["secret"]
    assert len(secret) >= 40 and made["name"] == "agent" and made["priority"] == "batch"
    listed = (await client.get("/router/v1/keys", headers=bearer(ADMIN))).json()["data"]
    assert [k["name"] for k in listed] == ["agent"]
    assert "secret" not in listed[0] and secret not in str(listed)
    r = await client.post("/v1/chat/completions", json=chat("chat-a"), headers=bearer(secret))
    assert r.status_code == 200, r.text
    # A scoped key is an inference key: the admin routes are not its.
    assert (await client.get("/router/v1/keys", headers=bearer(secret))).status_code == 403
    await client.post("/router/v1/site/analytics/flush", headers=bearer(ADMIN))
    db = harness.tmp / "data" / "router.sqlite"
    assert secret.encode() not in _all_bytes(db)
    assert secret not in caplog.text
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT key_name, status FROM analytics_events").fetchall()
    assert ("agent", 200) in rows


async def test_a_model_outside_the_list_is_403_naming_it_in_the_surface_shape(
    client: httpx.AsyncClient,
) -> None:
    secret = (await create(client, name="team", models=["team-*"]))["secret"]
    r = await client.post("/v1/chat/completions", json=chat("chat-b"), headers=bearer(secret))
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "permission_error"
    assert "chat-b" in r.json()["error"]["message"]
    ollama = await client.post(
        "/api/chat",
        json={"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]},
        headers=bearer(secret),
    )
    assert ollama.status_code == 403 and "chat-b" in ollama.json()["error"]
    assert isinstance(ollama.json()["error"], str)  # Ollama's shape: a plain string
    ok = await client.post("/v1/chat/completions", json=chat("team-x"), headers=bearer(secret))
    assert ok.status_code == 200


async def test_model_lists_show_only_what_the_key_may_use(client: httpx.AsyncClient) -> None:
    secret = (await create(client, name="team", models=["team-*", "chat-a"]))["secret"]
    openai = (await client.get("/v1/models", headers=bearer(secret))).json()["data"]
    assert sorted(m["id"] for m in openai) == ["chat-a", "team-x"]
    tags = (await client.get("/api/tags", headers=bearer(secret))).json()["models"]
    assert sorted(m["name"].split(":")[0] for m in tags) == ["chat-a", "team-x"]
    everything = (await client.get("/v1/models", headers=bearer(ADMIN))).json()["data"]
    assert sorted(m["id"] for m in everything) == ["chat-a", "chat-b", "team-x"]
    assert (await client.get("/v1/models/team-x", headers=bearer(secret))).status_code == 200
    hidden = await client.get("/v1/models/chat-b", headers=bearer(secret))
    assert hidden.status_code == 404  # not the key's: as if it did not exist


async def test_revoked_key_fails_its_next_request_with_401(client: httpx.AsyncClient) -> None:
    secret = (await create(client, name="temp"))["secret"]
    assert (await client.get("/v1/models", headers=bearer(secret))).status_code == 200
    gone = await client.delete("/router/v1/keys/temp", headers=bearer(ADMIN))
    assert gone.status_code == 200 and gone.json()["revoked"]
    r = await client.post("/v1/chat/completions", json=chat("chat-a"), headers=bearer(secret))
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    ollama = await client.get("/api/tags", headers=bearer(secret))
    assert ollama.status_code == 401 and isinstance(ollama.json()["error"], str)
    # Its name stays taken (its analytics keep meaning it); it cannot be revoked twice.
    again = await client.post("/router/v1/keys", json={"name": "temp"}, headers=bearer(ADMIN))
    assert again.status_code == 409
    assert (await client.delete("/router/v1/keys/temp", headers=bearer(ADMIN))).status_code == 404


async def test_over_the_daily_quota_is_429_with_retry_after(
    client: httpx.AsyncClient, harness: RouterHarness
) -> None:
    secret = (await create(client, name="meter", daily_tokens=1))["secret"]
    first = await client.post("/v1/chat/completions", json=chat("chat-a"), headers=bearer(secret))
    assert first.status_code == 200 and first.json()["usage"]["total_tokens"] >= 1
    r = await client.post("/v1/chat/completions", json=chat("chat-a"), headers=bearer(secret))
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
    assert 0 < int(r.headers["Retry-After"]) <= 86400
    listed = (await client.get("/router/v1/keys", headers=bearer(ADMIN))).json()["data"]
    assert listed[0]["tokens_today"] >= 1 and listed[0]["daily_tokens"] == 1
    # Raising the quota lets it through again.
    changed = await client.patch(
        "/router/v1/keys/meter", json={"daily_tokens": 100000}, headers=bearer(ADMIN)
    )
    assert changed.status_code == 200 and changed.json()["daily_tokens"] == 100000
    again = await client.post("/v1/chat/completions", json=chat("chat-a"), headers=bearer(secret))
    assert again.status_code == 200


async def test_a_long_streams_usage_counts_for_the_quota_at_once(
    client: httpx.AsyncClient,
) -> None:
    # 300 chunks: the usage report is the last of many in the kept tail (router/store/rows.py
    # reads it from the final report's start, not the whole tail).
    secret = (await create(client, name="streamer", daily_tokens=10**6))["secret"]
    body = chat("chat-a", stream=True, max_tokens=300, stream_options={"include_usage": True})
    url = "/v1/chat/completions"
    async with client.stream("POST", url, json=body, headers=bearer(secret)) as r:
        events = await read_sse(r)
    assert r.status_code == 200 and events[-1].data == "[DONE]"
    usage = json.loads(events[-2].data)["usage"]
    assert usage["completion_tokens"] == 300
    listed = (await client.get("/router/v1/keys", headers=bearer(ADMIN))).json()["data"]
    assert listed[0]["tokens_today"] == usage["total_tokens"]


async def test_per_key_analytics_and_metrics(client: httpx.AsyncClient) -> None:
    one = (await create(client, name="one", models=["chat-a"]))["secret"]
    await client.post("/v1/chat/completions", json=chat("chat-a"), headers=bearer(one))
    await client.post("/v1/chat/completions", json=chat("chat-b"), headers=bearer(one))
    summary = (await client.get("/router/v1/site/analytics", headers=bearer(ADMIN))).json()
    by_key = {k["key"]: k for k in summary["keys"]}
    assert by_key["one"]["requests"] == 2 and by_key["one"]["errors"] == 1
    assert by_key["one"]["tokens"]["total"] >= 1
    metrics = (await client.get("/metrics", headers=bearer(ADMIN))).text
    assert 'tensor_router_key_requests_total{key="one",status_class="2xx"} 1.0' in metrics
    assert 'tensor_router_key_errors_total{key="one"} 1.0' in metrics
    assert 'tensor_router_key_queue_wait_seconds_total{key="one"}' in metrics
    assert one not in metrics


async def test_keys_survive_a_restart(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start(secure(harness))
    secret = (await create(client, name="kept", max_concurrent=2, daily_tokens=10**6))["secret"]
    used = await client.post("/v1/chat/completions", json=chat("chat-a"), headers=bearer(secret))
    tokens = used.json()["usage"]["total_tokens"]
    await harness.close()
    client = await harness.start(secure(harness))
    listed = (await client.get("/router/v1/keys", headers=bearer(ADMIN))).json()["data"]
    assert listed[0]["name"] == "kept" and listed[0]["max_concurrent"] == 2
    # The day's usage is read back from the analytics rows: a restart does not reset a quota.
    assert listed[0]["tokens_today"] == tokens >= 1
    r = await client.post("/v1/chat/completions", json=chat("chat-a"), headers=bearer(secret))
    assert r.status_code == 200
    assert harness.app is not None and harness.app[STORE] is not None


async def test_bad_key_requests_are_400_and_unknown_keys_404(client: httpx.AsyncClient) -> None:
    bad = await client.post(
        "/router/v1/keys", json={"name": "x", "priority": "now"}, headers=bearer(ADMIN)
    )
    assert bad.status_code == 400 and "priority" in bad.json()["error"]["message"]
    missing = await client.patch("/router/v1/keys/nobody", json={}, headers=bearer(ADMIN))
    assert missing.status_code == 404


def _all_bytes(db: Path) -> bytes:
    return b"".join(
        p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name) and p.is_file()
    )


async def test_realtime_sessions_are_admitted_like_requests(client: httpx.AsyncClient) -> None:
    secret = (await create(client, name="voice", models=["chat-a"]))["secret"]
    url = str(client.base_url.join("/v1/realtime?model=voice-x")).replace("http", "ws", 1)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(url, headers=bearer(secret))
    assert refused.value.status == 403
