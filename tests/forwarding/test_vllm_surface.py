"""vLLM protocol surfaces through the real router and the fake vLLM backend.

S23 (strict allowlist: every allowlisted route reaches the backend, every other one is a 404
that never does, proved with the fake backend's --record-requests file), the render routes'
model requirement, responses affinity, the operational `/router/v1/vllm/...` routes, and the
`/v1/realtime` WebSocket relay (R13, R25, S16).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from router.classify import ROUTES, Route
from router.domain import Lane
from tests.support.harness import RouterHarness, chat, read_sse, wait_for

MODEL = "vl"  # one vLLM config with a text, an embeddings and a transcription model


def recording(h: RouterHarness) -> Path:
    path = h.tmp / "vllm-requests.jsonl"
    h.faults["vllm"] = f"--record-requests {path}"
    return path


def vllm_model(h: RouterHarness, model_id: str = MODEL, **fields: Any) -> None:
    h.model(
        model_id,
        "vllm",
        model_param=f"{model_id}-text.safetensors",
        embeddingsmodel=f"{model_id}-embed.safetensors",
        whispermodel=f"{model_id}-asr.safetensors",
        **fields,
    )


def reached(h: RouterHarness, record: Path) -> list[tuple[str, str]]:
    return [(r["method"], r["path"]) for r in h.records(record) if r.get("event") == "request"]


WAV = b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80>\x00\x00\x00}\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00"


async def send(client: httpx.AsyncClient, method: str, path: str, route: Route) -> httpx.Response:
    """One request naming MODEL the way the route reads its selector."""
    if route.selector.multipart_field:
        return await client.request(
            method, path, data={"model": MODEL}, files={"file": ("a.wav", WAV, "audio/wav")}
        )
    if method == "GET":
        return await client.request(method, path, params={"model": MODEL})
    body = {
        "model": MODEL,
        "prompt": "hi",
        "input": "hi",
        "messages": [{"role": "user", "content": "hi"}],
    }
    return await client.request(method, path, json=body)


def allowlisted() -> list[tuple[str, str, Route]]:
    """Every route on vLLM's allowlist that is forwarded as it is (router-local lists, the
    realtime socket and the id-following responses routes are tested on their own)."""
    rows = []
    for route in ROUTES:
        if not route.vllm or route.lane is None or "{" in route.template:
            continue
        if route.handler == "realtime.connect" or route.handler.startswith(("models.", "ollama.")):
            continue
        rows += [(m, route.template, route) for m in sorted(route.methods)]
    return rows


async def test_s23_every_allowlisted_route_reaches_the_vllm_backend(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness)
    client = await harness.start()
    rows = allowlisted()
    assert len(rows) >= 25, rows  # the allowlist did not shrink by accident
    for method, path, route in rows:
        r = await send(client, method, path, route)
        assert r.status_code != 404 or r.headers.get("x-fake-pid"), (path, r.text)
        assert (method, path) in reached(harness, record), f"{method} {path} never reached vLLM"
    lanes = {rt.spec.lane for rt in harness.runtimes.runtimes()}
    assert lanes == {Lane.TEXT, Lane.EMBEDDINGS, Lane.VOICE}


REFUSED = [
    # vLLM's development, profiler, RPC, weight-transfer, sleep and scaling surfaces
    *(
        ("POST", p)
        for p in (
            "/sleep",
            "/wake_up",
            "/collective_rpc",
            "/start_profile",
            "/stop_profile",
            "/reset_prefix_cache",
            "/reset_mm_cache",
            "/reset_encoder_cache",
            "/pause",
            "/resume",
            "/update_weights",
            "/init_weight_transfer_engine",
            "/abort_requests",
            "/scale_elastic_ep",
            "/inference/v1/generate",
            "/derender",
        )
    ),
    *(
        ("GET", p)
        for p in (
            "/is_sleeping",
            "/is_paused",
            "/server_info",
            "/get_world_size",
            "/is_scaling_elastic_ep",
            "/ping",
            "/version",
            "/load",
            "/tokenizer_info",
        )
    ),
    # llama-server slot actions and other families' routes, on a vLLM model
    ("POST", "/slots/0?action=save"),
    ("POST", "/slots/0?action=restore"),
    ("GET", "/slots"),
    ("POST", "/completion"),
    ("GET", "/props"),
    ("POST", "/infill"),
    ("POST", "/apply-template"),
    ("POST", "/embedding"),
    ("POST", "/v1/responses/input_tokens"),
    ("POST", "/v1/chat/completions/input_tokens"),
    ("POST", "/v1/reranking"),
    ("POST", "/v1/load_lora_adapter"),
    ("POST", "/v1/unload_lora_adapter"),
    ("GET", "/v1/anything"),
    ("POST", "/v1/audio/speech"),
    ("GET", "/v1/audio/voices"),
    ("POST", "/api/v1/generate"),
    ("POST", "/api/extra/generate/stream"),
    ("DELETE", "/v1/responses/resp_1"),
    # operational ops that are not on the list
    ("POST", "/router/v1/vllm/sleep"),
    ("POST", "/router/v1/vllm/collective_rpc"),
    ("GET", "/router/v1/vllm/server_info"),
    ("POST", "/router/v1/vllm/start_profile"),
]


async def test_s23_refused_routes_never_reach_a_backend(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness)
    client = await harness.start()
    assert (await client.post("/v1/chat/completions", json=chat(MODEL))).status_code == 200
    before = len(harness.records(record))
    for method, path in REFUSED:
        r = await client.request(
            method, path, json={"model": MODEL}, headers={"X-Tensors-Model": MODEL}
        )
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert "x-fake-pid" not in r.headers
        assert set(r.json()) & {"error", "detail"}, r.text  # the surface's own error shape
    leaked = harness.records(record)[before:]
    assert leaked == [], leaked


@pytest.mark.parametrize(
    "path", ["/v1/messages/render", "/v1/responses/render", "/cohere/v2/chat/render"]
)
async def test_render_routes_require_a_model(harness: RouterHarness, path: str) -> None:
    record = recording(harness)
    vllm_model(harness)
    client = await harness.start()
    r = await client.post(path, json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "model" and MODEL in r.json()["error"]["message"]
    assert reached(harness, record) == []  # nothing was loaded or asked
    r = await client.post(path, json={"model": MODEL, "messages": []})
    assert ("POST", path) in reached(harness, record)


# ---- responses affinity ------------------------------------------------------------------


def two_models(h: RouterHarness) -> Path:
    record = recording(h)
    for model_id in ("va", "vb"):
        h.model(model_id, "vllm", model_param=f"{model_id}.safetensors")
    return record


async def test_responses_follow_the_runtime_that_created_them(harness: RouterHarness) -> None:
    two_models(harness)
    client = await harness.start()
    created = await client.post("/v1/responses", json={"model": "va", "input": "hi"})
    assert created.status_code == 200, created.text
    rid, pid = created.json()["id"], created.headers["x-fake-pid"]
    assert rid.startswith(f"resp_{pid}_")
    # The id decides, not the model the follow-up names: no swap to vb.
    got = await client.get(f"/v1/responses/{rid}", headers={"X-Tensors-Model": "vb"})
    assert got.status_code == 200 and got.json()["id"] == rid
    assert got.headers["x-fake-pid"] == pid
    cancelled = await client.post(f"/v1/responses/{rid}/cancel", params={"model": "vb"})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.headers["x-fake-pid"] == pid
    assert harness.runtimes.spawn_count == 1


async def test_streamed_response_id_comes_from_response_created(harness: RouterHarness) -> None:
    two_models(harness)
    client = await harness.start()
    body = {"model": "va", "input": "hi", "stream": True}
    async with client.stream("POST", "/v1/responses", json=body) as r:
        events = await read_sse(r)
        pid = r.headers["x-fake-pid"]
    first = events[0]
    assert first.event == "response.created"
    rid = json.loads(first.data)["response"]["id"]
    got = await client.get(f"/v1/responses/{rid}")
    assert got.status_code == 200 and got.headers["x-fake-pid"] == pid


async def test_unknown_or_orphaned_response_ids_are_404(harness: RouterHarness) -> None:
    record = two_models(harness)
    client = await harness.start()
    created = (await client.post("/v1/responses", json={"model": "va", "input": "hi"})).json()
    unknown = await client.get("/v1/responses/resp_nobody_made_this")
    assert unknown.status_code == 404
    error = unknown.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "response_not_found"
    # A swap to vb stops va's process: its responses are gone with it, and asking for one
    # neither reloads va nor reaches vb.
    assert (await client.post("/v1/chat/completions", json=chat("vb"))).status_code == 200
    before = len(reached(harness, record))
    for method, path in (
        ("GET", f"/v1/responses/{created['id']}"),
        ("POST", f"/v1/responses/{created['id']}/cancel"),
    ):
        r = await client.request(method, path)
        assert r.status_code == 404, r.text
    assert reached(harness, record)[before:] == []
    assert harness.runtimes.spawn_count == 2


def test_response_id_scanner() -> None:
    from router.inference.pins import find_response_id

    assert find_response_id(b'{"id": "resp_1", "object": "response"}') == "resp_1"
    assert find_response_id(b'{"object": "response", "id": "resp_2"}') == "resp_2"
    assert find_response_id(b'{"object": "response", "id": "resp_3"') is None  # not complete yet
    sse = b'event: response.created\ndata: {"type":"response.created","response":{"id":"r4"}}\n'
    assert find_response_id(sse) == "r4"
    assert find_response_id(sse[:-1]) is None  # the data line is not complete yet
    assert find_response_id(b'{"error": {"message": "no"}}') is None


# ---- operational routes --------------------------------------------------------------------


async def test_operational_routes_need_a_running_vllm_model(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness)
    harness.model("llama-one")
    client = await harness.start()
    r = await client.get("/router/v1/vllm/health")
    assert r.status_code == 503 and "no vLLM model is running" in r.json()["error"]["message"]
    assert (await client.get("/router/v1/vllm/health", params={"model": "nope"})).status_code == 404
    r = await client.get("/router/v1/vllm/health", params={"model": "llama-one"})
    assert r.status_code == 400
    assert reached(harness, record) == []  # nothing loaded a model
    assert harness.runtimes.spawn_count == 0


async def test_operational_routes_reach_the_runtime(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness)
    client = await harness.start()
    assert (await client.post("/v1/chat/completions", json=chat(MODEL))).status_code == 200
    assert (await client.get("/router/v1/vllm/health")).status_code == 200
    version = await client.get("/router/v1/vllm/version", params={"model": MODEL})
    assert version.json() == {"version": "0.30.0+fake"}
    assert (await client.get("/router/v1/vllm/load")).json() == {"server_load": 0}
    metrics = await client.get("/router/v1/vllm/metrics")
    assert re.search(r"^vllm:num_requests_running 0$", metrics.text, re.M)
    await client.get("/router/v1/vllm/tokenizer_info")
    paths = [p for _, p in reached(harness, record)]
    assert {"/version", "/load", "/metrics", "/tokenizer_info"} <= set(paths)
    # Without --enable-lora (and always for elastic EP: the serve_args allowlist refuses the
    # flag) the dynamic ops do not exist.
    before = len(paths)
    for op in ("load_lora_adapter", "unload_lora_adapter", "scale_elastic_ep"):
        r = await client.post(f"/router/v1/vllm/{op}", json={"lora_name": "x"})
        assert r.status_code == 404, (op, r.text)
    assert len(reached(harness, record)) == before


async def test_dynamic_lora_only_with_enable_lora(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness, serve_args=["--enable-lora"])
    client = await harness.start()
    assert (await client.post("/v1/chat/completions", json=chat(MODEL))).status_code == 200
    body = {"lora_name": "style", "lora_path": str(harness.models_dir / "style-lora")}
    await client.post("/router/v1/vllm/load_lora_adapter", json=body)
    await client.post("/router/v1/vllm/unload_lora_adapter", json={"lora_name": "style"})
    paths = [p for _, p in reached(harness, record)]
    assert "/v1/load_lora_adapter" in paths and "/v1/unload_lora_adapter" in paths
    bad = await client.post(
        "/router/v1/vllm/load_lora_adapter", json={"lora_name": "x", "lora_path": "../../etc"}
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "lora_path"
    not_json = await client.post("/router/v1/vllm/load_lora_adapter", content=b"[1]")
    assert not_json.status_code == 400


async def test_operational_routes_are_admin_only(harness: RouterHarness) -> None:
    vllm_model(harness)
    base = harness.settings()
    settings = base.model_copy(
        update={
            "security": base.security.model_copy(update={"profile": "secure"}),
            "auth": base.auth.model_copy(
                update={"inference_keys": ["inf-4b1c9e0d7a2f"], "admin_keys": ["adm-8e5d2c7b1a09"]}
            ),
        }
    )
    client = await harness.start(settings)
    for key, status in (("inf-4b1c9e0d7a2f", 403), ("adm-8e5d2c7b1a09", 503)):
        r = await client.get("/router/v1/vllm/health", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == status, r.text
    assert (await client.get("/router/v1/vllm/health")).status_code == 401


# ---- /v1/realtime WebSocket --------------------------------------------------------------


def ws_url(h: RouterHarness, query: str = f"model={MODEL}") -> str:
    assert h.server is not None
    return str(h.server.make_url("/v1/realtime")) + (f"?{query}" if query else "")


def closed_codes(h: RouterHarness, record: Path) -> list[int | None]:
    return [r["code"] for r in h.records(record) if r.get("event") == "ws-closed"]


async def test_realtime_relays_frames_both_ways(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness)
    await harness.start()
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(ws_url(harness)) as ws:
            # The 101 answer says how long the session waited for its runtime (the first load).
            assert (
                int(ws._response.headers["X-Tensors-Queue-Wait-Ms"]) > 0
            )  # aiohttp keeps it there
            await ws.send_str('{"type": "session.update"}')
            assert (await ws.receive_str(timeout=5)) == '{"type": "session.update"}'
            await ws.send_bytes(b"\x00\xff" * 1000)
            assert (await ws.receive_bytes(timeout=5)) == b"\x00\xff" * 1000
            runtime = harness.runtimes.runtimes()[0]
            assert runtime.spec.lane is Lane.VOICE and runtime.leases == 1
            await ws.close(code=4002, message=b"done")
        async with session.ws_connect(
            ws_url(harness, ""), headers={"X-Tensors-Model": MODEL}
        ) as ws:
            await ws.send_str("close:4001")  # the backend ends the session with its own code
            msg = await ws.receive(timeout=5)
            assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == 4001
    assert await wait_for(lambda: harness.runtimes.runtimes()[0].leases == 0, 5.0), (
        "condition not reached in time"
    )
    assert await wait_for(lambda: len(closed_codes(harness, record)) == 2, 5.0), (
        "condition not reached in time"
    )
    assert closed_codes(harness, record) == [4002, 4001]
    assert harness.runtimes.spawn_count == 1


async def test_r13_open_realtime_session_blocks_idle_unload(harness: RouterHarness) -> None:
    vllm_model(harness)
    await harness.start(harness.settings(idle_unload=0.3))
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(ws_url(harness)) as ws:
            await ws.send_str("one")
            assert await ws.receive_str(timeout=5) == "one"
            pid = harness.backend_pids()
            await asyncio.sleep(1.2)  # four idle periods
            await ws.send_str("two")
            assert await ws.receive_str(timeout=5) == "two"
            assert harness.backend_pids() == pid and harness.runtimes.status_of(MODEL) == "ready"
    # Counting starts when the session ends.
    assert await wait_for(lambda: harness.runtimes.status_of(MODEL) == "unloaded", 5.0), (
        "condition not reached in time"
    )
    assert harness.runtimes.spawn_count == 1


async def test_r25_oversized_frame_is_refused_with_1009(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness)
    settings = harness.settings()
    limits = settings.limits.model_copy(update={"max_control_body_mb": 0.0625})  # 64 KiB
    await harness.start(settings.model_copy(update={"limits": limits}))
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(ws_url(harness), max_msg_size=0) as ws:
            await ws.send_bytes(b"\x00" * 100_000)
            msg = await ws.receive(timeout=10)
            assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == 1009
        # ... and a backend frame over the limit ends the session with 1011.
        async with session.ws_connect(ws_url(harness), max_msg_size=0) as ws:
            await ws.send_str("big:100000")
            msg = await ws.receive(timeout=10)
            assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == 1011
    assert await wait_for(lambda: len(closed_codes(harness, record)) == 2, 5.0), (
        "condition not reached in time"
    )
    assert closed_codes(harness, record)[0] == 1001  # the backend is told "going away"
    assert await wait_for(lambda: harness.runtimes.runtimes()[0].leases == 0, 5.0), (
        "condition not reached in time"
    )


async def test_r25_ten_megabyte_frame_never_reaches_the_backend(harness: RouterHarness) -> None:
    """With the default 8 MB limit: refused from the frame header, before any payload is
    buffered. The router closes while the client is still sending, so the client may see the
    1009 close frame or only a reset; either way the session ends and the backend saw nothing."""
    record = recording(harness)
    vllm_model(harness)
    await harness.start()
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(ws_url(harness), max_msg_size=0) as ws:
            with contextlib.suppress(ConnectionError):
                await ws.send_bytes(b"\x00" * (10 * 1024 * 1024))
            msg = await ws.receive(timeout=10)
            ended = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)
            assert msg.type in ended
            assert msg.type is not aiohttp.WSMsgType.CLOSE or msg.data == 1009
    assert await wait_for(lambda: closed_codes(harness, record) == [1001], 5.0), (
        "condition not reached in time"
    )
    assert await wait_for(lambda: harness.runtimes.runtimes()[0].leases == 0, 5.0), (
        "condition not reached in time"
    )


async def test_realtime_client_that_vanishes_releases_the_lease(harness: RouterHarness) -> None:
    vllm_model(harness)
    await harness.start()
    session = aiohttp.ClientSession()
    try:
        ws = await session.ws_connect(ws_url(harness))
        await ws.send_str("x")
        assert await ws.receive_str(timeout=5) == "x"
    finally:
        await session.connector.close()  # TCP gone, no close frame
        await session.close()
    assert await wait_for(lambda: harness.runtimes.runtimes()[0].leases == 0, 5.0), (
        "condition not reached in time"
    )


async def test_s16_foreign_origin_is_refused_before_101(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness)
    await harness.start()
    async with aiohttp.ClientSession() as session:
        for origin in ("http://evil.example", "null"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(ws_url(harness), origin=origin)
            assert refused.value.status == 403
        assert harness.server is not None
        own = f"http://{harness.server.host}:{harness.server.port}"
        async with session.ws_connect(ws_url(harness), origin=own) as ws:
            await ws.send_str("ok")
            assert await ws.receive_str(timeout=5) == "ok"
    assert reached(harness, record).count(("GET", "/v1/realtime")) == 1


async def test_realtime_errors_come_before_the_upgrade(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness)
    vllm_model(harness, "vl-two")  # two realtime models: naming none is ambiguous
    harness.model("text-only", "vllm", model_param="t.safetensors")
    client = await harness.start()
    plain = await client.get("/v1/realtime", params={"model": MODEL})
    assert plain.status_code == 400 and "WebSocket" in plain.json()["error"]["message"]
    async with aiohttp.ClientSession() as session:
        for query, status in (("model=nope", 404), ("model=text-only", 400), ("", 400)):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(ws_url(harness, query))
            assert refused.value.status == status, query
    assert reached(harness, record) == [] and harness.runtimes.spawn_count == 0
