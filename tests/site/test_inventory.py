"""Site inventory, node state and model-file hashing on a real router with fake backends."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path

from router.appkeys import STORE
from router.demo_models.gguf_llama import write_llama_gguf
from tests.support.harness import RouterHarness, chat
from tests.support.site_helpers import count_reads, site_settings, write

INV = "/router/v1/site/inventory"
HASH = "/router/v1/site/model-files/hash"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_inventory_shape_without_and_with_files(harness: RouterHarness) -> None:
    h = harness
    chat_kcpps = h.model("chat")
    write(h.models_dir / "lora-a.gguf", b"lora a")
    (h.kcpps_dir / "styled.kcpps").write_text(
        json.dumps(
            {
                "backend_mode": "kobold",
                "model_param": str(h.models_dir / "chat.gguf"),
                "lora": [str(h.models_dir / "lora-a.gguf")],
            }
        )
    )
    (h.models_dir / "sub").mkdir()
    write_llama_gguf(h.models_dir / "sub" / "tiny.gguf", seed=1, name="tiny", n_ctx=4096)
    write(h.models_dir / "notes.txt", b"not a model")
    write(h.models_dir / "weights.safetensors", b"{}")
    client = await h.start(site_settings(h))
    await client.post("/router/v1/site/models/state", json={"local_id": "styled", "enabled": False})

    r = await client.get(INV)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "site.inventory"
    assert (body["role"], body["node_id"]) == ("standalone", "local")
    assert body["files"] is None and body["errors"] == {}
    (node,) = body["nodes"]
    assert node["node_id"] == "local" and node["source"] == "local" and node["available"]
    assert node["models"] == ["chat", "styled"] and node["files"] is None
    models = {m["id"]: m for m in body["models"]}
    chat_m = models["chat"]
    assert chat_m["capabilities"] == ["text"] and chat_m["backend_mode"] == "llama_sdcpp"
    assert chat_m["enabled"] is True and models["styled"]["enabled"] is False
    assert chat_m["config_hash"] == sha(chat_kcpps)
    assert chat_m["model_hash"] == sha(h.models_dir / "chat.gguf")
    assert chat_m["state"] == "unloaded" and chat_m["runtimes"] == []
    assert chat_m["benchmark"] is None
    lora = [c for c in models["styled"]["components"] if c["field"] == "lora"]
    assert lora == [
        {
            "field": "lora",
            "position": 0,
            "filename": "lora-a.gguf",
            "path": str(h.models_dir / "lora-a.gguf"),
            "present": True,
            "size": 6,
            "sha256": sha(h.models_dir / "lora-a.gguf"),
        }
    ]

    r = await client.get(INV, params={"include_files": "true"})
    files = {f["name"]: f for f in r.json()["files"]}
    assert set(files) == {"chat.gguf", "lora-a.gguf", "tiny.gguf", "weights.safetensors"}
    assert files["weights.safetensors"]["kind"] == "safetensors"
    assert files["chat.gguf"]["used_by"] == [
        {"id": "chat", "field": "model_param"},
        {"id": "styled", "field": "model_param"},
    ]
    tiny = files["tiny.gguf"]
    assert tiny["sha256"] == sha(h.models_dir / "sub" / "tiny.gguf") and tiny["used_by"] == []
    assert tiny["metadata"]["architecture"] == "llama"
    assert tiny["metadata"]["context_length"] == 4096
    assert tiny["metadata"]["file_type"] == "ALL_F32"
    assert tiny["metadata"]["parameter_count"] > 0
    assert files["chat.gguf"]["metadata"] is None  # 4 bytes: not a readable GGUF
    assert r.json()["nodes"][0]["files"] == 4


async def test_inventory_refuses_bad_query_and_other_nodes(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    client = await h.start(site_settings(h))
    r = await client.get(INV, params={"include_files": "maybe"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "include_files"
    r = await client.get(INV, params={"node_id": "elsewhere"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "node_id"
    assert (await client.get(INV, params={"node_id": "local"})).status_code == 200


async def test_hash_cache_second_inventory_reads_nothing(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    paths = [write(h.models_dir / f"d{i // 50}" / f"m{i}.gguf", b"x%d" % i) for i in range(200)]
    client = await h.start(site_settings(h))
    reads = count_reads(h)
    r = await client.get(INV, params={"include_files": "true"})
    assert len(r.json()["files"]) == 201
    assert len(reads.reads) == 201 and len(set(reads.reads)) == 201

    reads.reads.clear()
    r = await client.get(INV, params={"include_files": "true"})
    assert reads.reads == []
    by_path = {f["path"]: f["sha256"] for f in r.json()["files"]}
    assert by_path[str(paths[7])] == sha(paths[7])

    # A changed file (new size and mtime) is read again, and only that one.
    paths[7].write_bytes(b"changed")
    r = await client.get(INV, params={"include_files": "true"})
    assert reads.reads == [str(paths[7].resolve())]
    assert {f["path"]: f["sha256"] for f in r.json()["files"]}[str(paths[7])] == sha(paths[7])

    # The cache is the store's table: a router started again on the same file reads nothing.
    await h.close()
    client = await h.start(site_settings(h))
    reads = count_reads(h)
    r = await client.get(INV, params={"include_files": "true"})
    assert r.status_code == 200 and reads.reads == []
    with sqlite3.connect(h.tmp / "data" / "router.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM file_hashes").fetchone()[0] == 201


async def test_hashing_leaves_the_event_loop_free(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    client = await h.start(site_settings(h))
    reads = count_reads(h)
    reads.gate = threading.Event()
    pending = asyncio.create_task(client.get(INV))
    try:
        await asyncio.to_thread(reads.entered.wait, 10)  # a read is in progress, held
        assert reads.entered.is_set()
        r = await client.get("/health")
        assert r.status_code == 200 and not pending.done()
    finally:
        reads.gate.set()
    assert (await pending).status_code == 200


async def test_a_read_survives_the_client_that_asked(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    client = await h.start(site_settings(h))
    reads = count_reads(h)
    reads.gate = threading.Event()
    assert h.app is not None
    store, added = h.app[STORE], asyncio.Event()
    keep = store.file_hashes.add

    def spy(row: tuple[str, int, int, str, str | None, float]) -> None:
        keep(row)
        added.set()

    store.file_hashes.add = spy  # type: ignore[method-assign]
    pending = asyncio.create_task(client.get(INV))
    await asyncio.to_thread(reads.entered.wait, 10)
    pending.cancel()  # the client goes away while its file is being read
    with contextlib.suppress(asyncio.CancelledError):
        await pending
    reads.gate.set()
    await asyncio.wait_for(added.wait(), 10)  # the finished read is stored all the same
    r = await client.get(INV)
    assert r.status_code == 200
    assert reads.reads == [str((h.models_dir / "chat.gguf").resolve())]
    assert r.json()["models"][0]["model_hash"] == sha(h.models_dir / "chat.gguf")


async def test_runtime_state_and_unload(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    h.model("other")
    client = await h.start(site_settings(h))
    assert (await client.post("/v1/chat/completions", json=chat("chat"))).status_code == 200

    r = await client.get("/router/v1/site/nodes/state")
    body = r.json()
    (rt,) = body["runtimes"]
    assert rt["model"] == "chat" and rt["lane"] == "text" and rt["state"] == "ready"
    assert rt["pid"] == h.backend_pids()[0] and isinstance(rt["port"], int)
    assert rt["in_flight"] == 0 and rt["queued"] == 0 and rt["since"] > 0
    assert body["active_requests"] == 0 and body["queued_requests"] == 0
    inv = {m["id"]: m for m in (await client.get(INV)).json()["models"]}
    assert inv["chat"]["state"] == "ready" and inv["chat"]["runtimes"][0]["pid"] == rt["pid"]

    unload = "/router/v1/site/nodes/unload"
    # Another model named: nothing of ours stops.
    r = await client.post(unload, json={"model": "other"})
    assert r.status_code == 200 and r.json()["unloaded"] == []
    assert len((await client.get("/router/v1/site/nodes/state")).json()["runtimes"]) == 1
    r = await client.post(unload, json={"model": "chat"})
    assert r.json()["unloaded"] == [rt["runtime"]]
    assert (await client.get("/router/v1/site/nodes/state")).json()["runtimes"] == []

    assert (await client.post("/v1/chat/completions", json=chat("chat"))).status_code == 200
    r = await client.post(unload, json={"lane": "text", "node_id": "local"})
    assert len(r.json()["unloaded"]) == 1
    for body, status, param in (
        ({}, 400, "lane"),
        ({"lane": "sideways"}, 400, "lane"),
        ({"lane": ["text"]}, 400, "lane"),
        ({"model": 5}, 400, "model"),
        ({"model": "nope"}, 404, None),
        ({"lane": "all", "node_id": "elsewhere"}, 404, "node_id"),
        ({"lane": "all", "node_id": 3}, 400, "node_id"),
    ):
        r = await client.post(unload, json=body)
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"].get("param") == param


async def test_model_file_hash_answers_inventory_files_only(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    inside = write(h.models_dir / "sub" / "in.gguf", b"inside")
    outside = write(h.tmp / "outside" / "secret.gguf", b"secret")
    os.symlink(outside, h.models_dir / "link.gguf")
    os.symlink(outside.parent, h.models_dir / "linkdir")
    client = await h.start(site_settings(h))
    reads = count_reads(h)

    r = await client.post(HASH, json={"path": str(inside)})
    assert r.status_code == 200, r.text
    assert r.json() == {"node_id": "local", "path": str(inside), "size": 6, "sha256": sha(inside)}
    r = await client.post(HASH, json={"path": "sub/in.gguf"})  # relative to a root
    assert r.json()["sha256"] == sha(inside)

    files = (await client.get(INV, params={"include_files": "true"})).json()["files"]
    assert {f["name"] for f in files} == {"chat.gguf", "in.gguf"}

    models = str(h.models_dir)
    refused = [
        "../outside/secret.gguf",
        f"{models}/../outside/secret.gguf",
        f"{models}/sub/../../outside/secret.gguf",
        str(outside),
        "/etc/passwd",
        "%2e%2e/outside/secret.gguf",
        f"{models}/%2e%2e/outside/secret.gguf",
        f"{models}/link.gguf",
        "link.gguf",
        f"{models}/linkdir/secret.gguf",
        f"{models}/sub/./in.gguf",
        f"{models}/sub/nothere.gguf",
    ]
    for path in refused:
        r = await client.post(HASH, json={"path": path})
        assert r.status_code == 404, (path, r.text)
        assert r.json()["error"]["param"] == "path"
    for body in ({"path": f"{models}/sub/in.gguf\x00.txt"}, {"path": 7}, {"path": ""}, {}):
        r = await client.post(HASH, json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "path", body
    r = await client.post(HASH, json={"path": str(inside), "node_id": "elsewhere"})
    assert r.status_code == 404
    r = await client.post(HASH, content=b"[1]")
    assert r.status_code == 400
    assert (await client.get(HASH)).status_code == 405
    assert (
        await client.post("/router/v1/site/model-files/%2e%2e/hash", json={})
    ).status_code == 404
    assert str(outside.resolve()) not in reads.reads


async def test_control_bodies_are_capped(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    client = await h.start(site_settings(h, max_control_body_mb=0.001))
    big = {"path": "x" * 4000}
    assert (await client.post(HASH, json=big)).status_code == 413
    r = await client.post("/router/v1/site/model-assets/resolve", json={"kcpps": {"a": "b" * 4000}})
    assert r.status_code == 413
