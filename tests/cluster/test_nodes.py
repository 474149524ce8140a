"""Several real routers on loopback: registration, polling, merged listings and relayed requests.

Each node is a `tensor-router start` subprocess with its own configurations and fake backends;
the master reaches slaves only through configured URLs with the cluster token.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import httpx

from tests.support.cluster import (
    AUTH,
    cluster,
    listed_ids,
    ps_names,
    served_models,
    served_rows,
    start_all,
)
from tests.support.harness import RouterHarness, free_port, read_sse, until, wav_bytes
from tests.support.router_process import CLI, RouterProcess


async def test_master_lists_and_serves_a_slave_model(tmp_harness: RouterHarness) -> None:
    c = cluster(tmp_harness, {"local-a": b"A"}, {"far-b": b"B"})
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: listed_ids(client), ["far-b", "local-a"])
        listed = {m["id"]: m for m in (await client.get("/router/v1/models")).json()["data"]}
        assert listed["far-b"]["node_id"] == "s1" and listed["far-b"]["source"] == "slave"
        assert [r["node_id"] for r in listed["far-b"]["replicas"]] == ["s1"]
        body = {"model": "far-b", "messages": [{"role": "user", "content": "hi"}]}
        reply = await client.post("/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == "far-b"
        async with client.stream(
            "POST", "/v1/chat/completions", json={**body, "stream": True}
        ) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            events = await read_sse(r)
        chunks = [json.loads(e.data) for e in events if e.data.startswith("{")]
        assert chunks and all(ch["model"] == "far-b" for ch in chunks)
        assert events[-1].data == "[DONE]"
        tags = (await client.get("/api/tags")).json()["models"]
        assert sorted(t["name"] for t in tags) == ["far-b", "local-a"]
        # Loaded on the slave: /api/ps on the master shows it once a poll has seen it.
        assert await until(lambda: ps_names(client), ["far-b"])
    # The CLI shows the registry as the master sees it.
    shown = await asyncio.to_thread(
        subprocess.run,
        [str(CLI), "nodes", "--url", c.master.base],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line.split() for line in shown.stdout.splitlines()[1:]}
    assert rows["m"][1:3] == ["master", "ok"] and rows["s1"][1:3] == ["slave", "ok"]
    assert rows["s1"][-1] == c.slaves[0].base


async def test_node_routes_take_the_cluster_token_only(tmp_harness: RouterHarness) -> None:
    c = cluster(tmp_harness, {"a": b"A"}, {"b": b"B"})
    await start_all(c)
    slave = c.slaves[0]
    async with httpx.AsyncClient(base_url=slave.base, timeout=10) as client:
        assert (await client.get("/router/v1/node/models")).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (await client.get("/router/v1/node/models", headers=wrong)).status_code == 401
        snap = (await client.get("/router/v1/node/models", headers=AUTH)).json()
        assert snap["node_id"] == "s1" and [m["local_id"] for m in snap["models"]] == ["b"]
        # A slave is no management surface.
        assert (await client.get("/router/v1/site/inventory")).status_code == 404
        inner = await client.get("/router/v1/node/inference//evil/v1/models", headers=AUTH)
        assert inner.status_code == 404
        site = await client.get("/router/v1/node/inference/router/v1/site/inventory", headers=AUTH)
        assert site.status_code == 404


async def test_unknown_url_and_duplicate_identity_are_refused(tmp_harness: RouterHarness) -> None:
    c = cluster(tmp_harness, {"a": b"A"}, {"b": b"B"})
    await c.master.start()
    snap: dict[str, Any] = {"protocol": 1, "node_id": "x", "node_url": "http://127.0.0.1:1"}
    async with httpx.AsyncClient(base_url=c.master.base, timeout=10) as client:
        r = await client.post("/router/v1/node/register", json=snap, headers=AUTH)
        assert r.status_code == 400 and r.json()["error"]["type"] == "cluster_error"
        own = {**snap, "node_id": "m", "node_url": c.slaves[0].base}
        r = await client.post("/router/v1/node/register", json=own, headers=AUTH)
        assert r.status_code == 409 and r.json()["error"]["code"] == "duplicate_node"
        old = {**snap, "protocol": 0, "node_id": "s1", "node_url": c.slaves[0].base}
        r = await client.post("/router/v1/node/register", json=old, headers=AUTH)
        assert (
            r.status_code == 400
            and "update tensor-router on node s1" in r.json()["error"]["message"]
        )


async def test_conflicting_identity_gets_a_suffix_and_ids_are_rewritten(
    tmp_harness: RouterHarness,
) -> None:
    c = cluster(tmp_harness, {"q": b"master weights"}, {"q": b"other weights, other size"})
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: listed_ids(client), ["q", "q-2"])
        body = {"model": "q-2", "messages": [{"role": "user", "content": "hi"}]}
        reply = await client.post("/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == "q-2"
        # Served by the slave, as its own `q`: the slave's analytics say so, the master's none.
        assert await until(lambda: served_models(c.slaves[0]), ["q"])
        assert await served_models(c.master) == []


async def test_r34_an_address_in_a_request_is_refused_and_never_called(
    tmp_harness: RouterHarness,
) -> None:
    trap_hits: list[str] = []
    from aiohttp import web

    async def trap(request: web.Request) -> web.Response:
        trap_hits.append(request.path)
        return web.Response(text="trapped")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", trap)
    runner = web.AppRunner(app)
    await runner.setup()
    trap_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", trap_port).start()
    try:
        c = cluster(tmp_harness, {"a": b"A"}, {"b": b"B"})
        await start_all(c)
        trap_url = f"http://127.0.0.1:{trap_port}"
        async with httpx.AsyncClient(base_url=c.master.base, timeout=10) as client:
            replies = [
                await client.get("/router/v1/site/inventory", params={"node_url": trap_url}),
                await client.post(
                    "/router/v1/site/models/state",
                    json={"node_url": trap_url, "local_id": "a", "enabled": False},
                ),
                await client.get("/router/v1/site/load-errors", params={"node_url": trap_url}),
            ]
        assert [r.status_code for r in replies] == [400, 400, 400]
        assert all("node_id" in r.json()["error"]["message"] for r in replies)
        assert trap_hits == []
    finally:
        await runner.cleanup()


async def test_duplicate_identity_stops_the_slave(tmp_harness: RouterHarness) -> None:
    c = cluster(tmp_harness, {"a": b"A"}, {"b": b"B"}, {"c": b"C"})
    # The second slave claims the first one's node id.
    text = c.slaves[1].config.read_text().replace("node_id: s2", "node_id: s1")
    c.slaves[1].config.write_text(text)
    await c.master.start()
    await c.slaves[0].start()
    async with httpx.AsyncClient(base_url=c.master.base, timeout=10) as client:
        assert await until(lambda: listed_ids(client), ["a", "b"])
    # Launched, not started: it may be refused and stop before it ever answers /health.
    c.slaves[1].launch()
    assert await c.slaves[1].wait_exit(20) is not None
    assert "already registered" in c.slaves[1].log.read_text()
    async with httpx.AsyncClient(base_url=c.master.base, timeout=10) as client:
        assert await listed_ids(client) == ["a", "b"]


async def test_r33_a_slave_killed_mid_stream(tmp_harness: RouterHarness) -> None:
    """The client's stream ends with an error event, the node is marked unhealthy, new requests
    go to the other replica, and the killed node rejoins after a restart."""
    tmp_harness.faults["llamacpp"] = "--tokens 400 --token-rate 20"
    # The master's own health poll is 60 s away: only the failed relay can mark the node.
    c = cluster(tmp_harness, {}, {"shared": b"S"}, {"shared": b"S"}, health_interval=60)
    await start_all(c)
    body = {"model": "shared", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with httpx.AsyncClient(base_url=c.master.base, timeout=60) as client:
        assert await until(lambda: replica_nodes(client, "shared"), ["s1", "s2"])
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            first = await anext(lines)
            while not first.startswith("data:"):
                first = await anext(lines)
            victim = next(s for s in c.slaves if _serving(s))
            victim.kill()
            rest = [line async for line in lines]
        assert _terminal_error(rest)
        assert "data: [DONE]" not in rest
        survivor = next(s for s in c.slaves if s is not victim)
        # Marked unhealthy by the failed relay itself, long before any poll.
        assert await until(lambda: available_on(client, "shared"), [survivor.name], deadline=5)
        quick = {**body, "stream": False}
        tmp_harness.faults["llamacpp"] = ""
        reply = await client.post("/v1/chat/completions", json=quick)
        assert reply.status_code == 200, reply.text
        assert await until(lambda: available_on(client, "shared"), [survivor.name])
        await victim.start()
        assert await until(lambda: available_on(client, "shared"), ["s1", "s2"], deadline=30)


def _terminal_error(lines: list[str]) -> str:
    """The message of the stream's last event, which must be a terminated error event."""
    assert lines and lines[-1] == "", f"the last event has no closing blank line: {lines[-3:]}"
    events: list[list[str]] = [[]]
    for line in lines:
        if line:
            events[-1].append(line)
        elif events[-1]:
            events.append([])
    last = events[-2]
    data = "\n".join(line[5:].lstrip() for line in last if line.startswith("data:"))
    message = json.loads(data)["error"]["message"]
    assert isinstance(message, str) and message, last
    return message


def _serving(node: RouterProcess) -> bool:
    return bool(node.descendants())


async def replica_nodes(client: httpx.AsyncClient, model_id: str) -> list[str]:
    data = (await client.get("/router/v1/models")).json()["data"]
    entry = next((m for m in data if m["id"] == model_id), None)
    return sorted(r["node_id"] for r in entry["replicas"]) if entry else []


async def available_on(client: httpx.AsyncClient, model_id: str) -> list[str]:
    data = (await client.get("/router/v1/models")).json()["data"]
    entry = next((m for m in data if m["id"] == model_id), None)
    return sorted(r["node_id"] for r in entry["replicas"] if r["available"]) if entry else []


async def test_clients_use_two_slaves_through_the_master(tmp_harness: RouterHarness) -> None:
    """The openai and ollama clients, pointed at the master, use models on two slaves with
    streaming; one model with a replica on each slave is served by both in turn."""
    import ollama
    import openai

    c = cluster(tmp_harness, {}, {"alpha": b"A", "both": b"X"}, {"q": b"Q1 weights", "both": b"X"})
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: listed_ids(client), ["alpha", "both", "q"])
        assert await until(lambda: replica_nodes(client, "both"), ["s1", "s2"])
    # First, while no lane holds another model (under `residency: lane` a slave whose text
    # lane holds alpha or q says its load of "both" evicts: docs/residency.md).
    olla = ollama.AsyncClient(host=c.master.base)
    for _ in range(4):
        reply = await olla.chat(model="both", messages=[{"role": "user", "content": "hi"}])
        assert reply.model == "both"
    oai = openai.AsyncOpenAI(base_url=c.master.base + "/v1", api_key="unused")
    done = await oai.chat.completions.create(
        model="alpha", messages=[{"role": "user", "content": "hi"}]
    )
    assert done.model == "alpha" and done.choices[0].message.content
    stream = await oai.chat.completions.create(
        model="q", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    pieces = [chunk async for chunk in stream]
    assert pieces and {p.model for p in pieces} == {"q"}
    await oai.close()
    answer = await olla.chat(model="alpha", messages=[{"role": "user", "content": "hi"}])
    assert answer.model == "alpha" and answer.message.content
    parts = [
        p
        async for p in await olla.chat(
            model="q", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    ]
    assert parts[-1].done and {p.model for p in parts} == {"q"}
    served = [
        await until(
            lambda s=s: served_models(s), ["alpha", "both"] if s.name == "s1" else ["both", "q"]
        )
        for s in c.slaves
    ]
    assert served == [True, True]


async def test_site_apis_reach_a_slave_by_node_id(tmp_harness: RouterHarness) -> None:
    c = cluster(tmp_harness, {"a": b"A"}, {"b": b"B", "b2": b"B2"})
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: listed_ids(client), ["a", "b", "b2"])
        inv = await client.get("/router/v1/site/inventory", params={"node_id": "s1"})
        assert inv.status_code == 200, inv.text
        assert inv.json()["node_id"] == "s1"
        assert sorted(m["id"] for m in inv.json()["models"]) == ["b", "b2"]
        off = {"node_id": "s1", "local_id": "b2", "enabled": False}
        reply = await client.post("/router/v1/site/models/state", json=off)
        assert reply.status_code == 200, reply.text
        assert await until(lambda: listed_ids(client), ["a", "b"])
        errors = await client.get("/router/v1/site/load-errors", params={"node_id": "s1"})
        assert errors.status_code == 200 and errors.json()["nodes"] == ["s1"]
        db = await client.get("/router/v1/site/store/download", params={"node_id": "s1"})
        assert db.status_code == 200 and db.content.startswith(b"SQLite format 3")
        assert "analytics-s1-" in db.headers["content-disposition"]
        unknown = await client.get("/router/v1/site/inventory", params={"node_id": "nope"})
        assert unknown.status_code == 404


async def test_flush_and_load_errors_cover_every_node(tmp_harness: RouterHarness) -> None:
    """Without a node filter the master answers for the cluster; a node that is down is
    listed in `failed`, never failing the call."""
    tmp_harness.faults["llamacpp"] = "--exit-at-start 3"
    c = cluster(tmp_harness, {"a": b"A"}, {"b": b"B"}, {"c": b"C"})
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: listed_ids(client), ["a", "b", "c"])
        for model in ("a", "b"):
            body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 502
        c.slaves[1].kill()
        flushed = (await client.post("/router/v1/site/analytics/flush")).json()
        assert sorted(flushed["persisted"]) == ["m", "s1"]
        assert [f["node_id"] for f in flushed["failed"]] == ["s2"]
        listed = (await client.get("/router/v1/site/load-errors")).json()
        assert listed["nodes"] == ["m", "s1"]
        assert sorted((e["node_id"], e["model"]) for e in listed["errors"]) == [
            ("m", "a"),
            ("s1", "b"),
        ]
        only = (await client.get("/router/v1/site/load-errors", params={"node_id": "s1"})).json()
        assert [e["model"] for e in only["errors"]] == ["b"]
        summary = (await client.get("/router/v1/site/analytics")).json()
        assert summary["nodes"] == ["m", "s1"] and [f["node_id"] for f in summary["failed"]] == [
            "s2"
        ]
        assert summary["per_node"]["s1"]["totals"]["requests"] == 1
        assert summary["per_node"]["m"]["totals"]["requests"] == 1
        one = (await client.get("/router/v1/site/analytics", params={"node_id": "s1"})).json()
        assert one["nodes"] == ["s1"] and "per_node" not in one
        cleared = (await client.delete("/router/v1/site/load-errors")).json()
        assert cleared["removed"] == 2 and sorted(cleared["cleared"]) == ["m", "s1"]
        assert [f["node_id"] for f in cleared["failed"]] == ["s2"]
        assert (await client.get("/router/v1/site/load-errors")).json()["errors"] == []


async def test_multipart_transcription_through_the_master(tmp_harness: RouterHarness) -> None:
    """A multipart body relayed as sent, in several writes: the slave's whisper-server gets
    the whole audio (the fake backend echoes its length)."""
    c = cluster(tmp_harness, {"a": b"A"}, {})
    folder = tmp_harness.tmp / "kcpps-s1"
    (tmp_harness.tmp / "models-s1" / "ggml-base.bin").write_bytes(b"ggml")
    body = {
        "backend_mode": "llama_sdcpp",
        "whispermodel": str(tmp_harness.tmp / "models-s1" / "ggml-base.bin"),
    }
    (folder / "ears.kcpps").write_text(json.dumps(body))
    await start_all(c)
    audio = wav_bytes(seconds=8.0)  # 256 KB: several writes on the way
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: router_ids(client), ["a", "ears"])
        reply = await client.post(
            "/v1/audio/transcriptions",
            files={"file": ("a.wav", audio, "audio/wav")},
            data={"model": "ears", "response_format": "json"},
        )
        assert reply.status_code == 200, reply.text
        assert f"{len(audio)} bytes" in reply.text
    assert await until(lambda: served_models(c.slaves[0]), ["ears"])


async def router_ids(client: httpx.AsyncClient) -> list[str]:
    return sorted(m["id"] for m in (await client.get("/router/v1/models")).json()["data"])


def voice_config(h: RouterHarness, node: str, model_id: str) -> None:
    """A whisper configuration in `node`'s folders (made by cluster())."""
    weights = h.tmp / f"models-{node}" / f"{model_id}.bin"
    weights.write_bytes(b"ggml" + model_id.encode())
    body = {"backend_mode": "llama_sdcpp", "whispermodel": str(weights)}
    (h.tmp / f"kcpps-{node}" / f"{model_id}.kcpps").write_text(json.dumps(body))


async def test_selectorless_speech_to_text_goes_to_the_node_with_it_loaded(
    tmp_harness: RouterHarness,
) -> None:
    """No model named: an idle capable node takes the first request, then the node that has
    a speech model loaded keeps taking them, ahead of the master's own unloaded one."""
    c = cluster(tmp_harness, {}, {}, {})
    voice_config(tmp_harness, "master", "ears-m")
    voice_config(tmp_harness, "s1", "ears-1")
    voice_config(tmp_harness, "s2", "ears-2")
    await start_all(c)
    files = {"file": ("a.wav", wav_bytes(), "audio/wav")}
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: router_ids(client), ["ears-1", "ears-2", "ears-m"])
        for _ in range(3):
            reply = await client.post("/v1/audio/transcriptions", files=files)
            assert reply.status_code == 200, reply.text

    async def counts() -> list[int]:
        return sorted([len(await served_rows(s)) for s in c.slaves])

    assert await until(counts, [0, 3]), await counts()
    assert await served_models(c.master) == []


async def test_follow_ups_go_to_the_node_that_made_them(tmp_harness: RouterHarness) -> None:
    """An sd-server job submitted through the master is polled there; a stored response is
    read back from the node that made it."""
    c = cluster(tmp_harness, {}, {})
    weights = tmp_harness.tmp / "models-s1" / "art.safetensors"
    weights.write_bytes(b"safetensors")
    art = {"backend_mode": "llama_sdcpp", "sdmodel": str(weights)}
    (tmp_harness.tmp / "kcpps-s1" / "art.kcpps").write_text(json.dumps(art))
    (tmp_harness.tmp / "models-s1" / "talk.safetensors").write_bytes(b"weights")
    talk = {
        "backend_mode": "vllm",
        "model_param": str(tmp_harness.tmp / "models-s1" / "talk.safetensors"),
    }
    (tmp_harness.tmp / "kcpps-s1" / "talk.kcpps").write_text(json.dumps(talk))
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: router_ids(client), ["art", "talk"])
        job = await client.post("/sdcpp/v1/img_gen", json={"prompt": "x", "model": "art-art"})
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]
        for _ in range(200):
            polled = await client.get(f"/sdcpp/v1/jobs/{job_id}")
            assert polled.status_code == 200, polled.text
            if polled.json()["status"] == "completed":
                break
            await asyncio.sleep(0.05)
        assert polled.json()["status"] == "completed"
        created = await client.post("/v1/responses", json={"model": "talk", "input": "hi"})
        assert created.status_code == 200, created.text
        rid = created.json()["id"]
        got = await client.get(f"/v1/responses/{rid}")
        assert got.status_code == 200 and got.json()["id"] == rid
        unknown = await client.get("/v1/responses/resp_nope")
        assert unknown.status_code == 404


async def test_a_realtime_websocket_through_the_master(tmp_harness: RouterHarness) -> None:
    """Frames both ways and the close code, through master and slave to the slave's vLLM."""
    import aiohttp

    c = cluster(tmp_harness, {}, {})
    for name in ("ears.safetensors", "text.safetensors"):
        (tmp_harness.tmp / "models-s1" / name).write_bytes(b"weights")
    live = {
        "backend_mode": "vllm",
        "model_param": str(tmp_harness.tmp / "models-s1" / "text.safetensors"),
        "whispermodel": str(tmp_harness.tmp / "models-s1" / "ears.safetensors"),
    }
    (tmp_harness.tmp / "kcpps-s1" / "live.kcpps").write_text(json.dumps(live))
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: router_ids(client), ["live"])
    url = c.master.base.replace("http", "ws") + "/v1/realtime?model=live"
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.send_str('{"type": "session.update"}')
        assert (await ws.receive_str(timeout=10)) == '{"type": "session.update"}'
        await ws.send_bytes(b"\x00\xff" * 5000)
        assert (await ws.receive_bytes(timeout=10)) == b"\x00\xff" * 5000
        await ws.send_str("close:4001")  # the backend ends the session with its own code
        msg = await ws.receive(timeout=10)
        assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == 4001
    assert await until(lambda: served_models(c.slaves[0]), ["live"])


async def test_load_captures_from_several_nodes(tmp_harness: RouterHarness) -> None:
    import yaml

    tmp_harness.faults["llamacpp"] = "--exit-at-start 3"
    c = cluster(tmp_harness, {"a": b"A"}, {"b": b"B"})
    for node in (c.master, *c.slaves):
        config = yaml.safe_load(node.config.read_text())
        config["analytics"]["load_capture_enabled"] = True
        node.config.write_text(yaml.safe_dump(config))
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: listed_ids(client), ["a", "b"])
        for model in ("a", "b"):
            body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 502

        async def captured(**params: Any) -> list[tuple[str, str]]:
            reply = await client.get("/router/v1/site/load-captures", params=params)
            assert reply.status_code == 200, reply.text
            return sorted((row["node_id"], row["model"]) for row in reply.json()["captures"])

        assert await until(lambda: captured(), [("m", "a"), ("s1", "b")])
        both = await client.get(
            "/router/v1/site/load-captures", params=[("node", "m"), ("node", "s1"), ("limit", "1")]
        )
        assert len(both.json()["captures"]) == 1 and set(both.json()["cursors"]) == {"m", "s1"}
        assert await captured(node="s1") == [("s1", "b")]
        unknown = await client.get("/router/v1/site/load-captures", params={"node": "zz"})
        assert unknown.status_code == 404


async def test_a_slave_keeps_serving_and_registering_while_the_master_is_down(
    tmp_harness: RouterHarness,
) -> None:
    c = cluster(tmp_harness, {"a": b"A"}, {"b": b"B"})
    slave = c.slaves[0]
    await slave.start()  # the master is not running yet
    body = {"model": "b", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(base_url=slave.base, timeout=30) as client:
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200

    async def failed_registrations() -> bool:
        return slave.log.read_text().count("registration with the master failed") >= 2

    assert await until(failed_registrations, True)  # it retries every sync_interval
    await c.master.start()
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: listed_ids(client), ["a", "b"])
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
