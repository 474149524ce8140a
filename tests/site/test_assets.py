"""Model assets: portable export, resolution, import, hash lookup, unresolved refusal."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx

from router.appkeys import CATALOG
from tests.support.harness import RouterHarness, chat
from tests.support.site_helpers import count_reads, site_settings, write

ASSETS = "/router/v1/site/model-assets"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def styled(h: RouterHarness) -> Path:
    """A Kobold config with a text model and two LoRA files (a list field)."""
    for name in ("base.gguf", "l1.gguf", "l2.gguf"):
        write(h.models_dir / name, name.encode())
    path = h.kcpps_dir / "styled.kcpps"
    path.write_text(
        json.dumps(
            {
                "backend_mode": "kobold",
                "model_param": str(h.models_dir / "base.gguf"),
                "lora": [str(h.models_dir / "l1.gguf"), "", str(h.models_dir / "l2.gguf")],
                "contextsize": 4096,
            }
        )
    )
    return path


async def export(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    r = await client.post(f"{ASSETS}/export", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_export_replaces_every_path_with_hash_and_name(harness: RouterHarness) -> None:
    h = harness
    styled(h)
    client = await h.start(site_settings(h))
    body = await export(client, id="styled")
    assert (body["node_id"], body["id"], body["filename"]) == ("local", "styled", "styled.kcpps")
    doc = body["kcpps"]
    assert "model_param" not in doc and "lora" not in doc
    assert doc["model_param_hash"] == sha(h.models_dir / "base.gguf")
    assert doc["model_param_filename"] == "base.gguf"
    assert doc["lora_hash"] == [sha(h.models_dir / "l1.gguf"), sha(h.models_dir / "l2.gguf")]
    assert doc["lora_filename"] == ["l1.gguf", "l2.gguf"]
    assert doc["contextsize"] == 4096 and doc["backend_mode"] == "kobold"
    assert str(h.models_dir) not in json.dumps(doc)
    assert (await export(client, filename="styled.kcpps"))["kcpps"] == doc

    for req, status, param in (
        ({}, 400, "id"),
        ({"id": 3}, 400, "id"),
        ({"id": "nope"}, 404, "id"),
        ({"id": "styled", "node_id": "elsewhere"}, 404, "node_id"),
    ):
        r = await client.post(f"{ASSETS}/export", json=req)
        assert r.status_code == status and r.json()["error"]["param"] == param, req


async def test_export_import_round_trip_runs_the_copy(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    client = await h.start(site_settings(h))
    doc = (await export(client, id="chat"))["kcpps"]

    r = await client.post(f"{ASSETS}/resolve", json={"kcpps": doc, "id": "copy"})
    assert r.status_code == 200
    (result,) = r.json()["results"]
    assert result["resolved"] is True and result["source"] == "index"
    assert result["path"] == str(h.models_dir / "chat.gguf") and result["failure"] is None

    r = await client.post(f"{ASSETS}/import", json={"id": "copy", "kcpps": doc})
    assert r.status_code == 200, r.text
    written = json.loads((h.kcpps_dir / "copy.kcpps").read_text())
    assert written["model_param"] == str(h.models_dir / "chat.gguf")
    assert not any(k.endswith(("_hash", "_filename")) for k in written)
    assert [p.name for p in h.kcpps_dir.iterdir() if p.name.startswith(".")] == []
    ids = [m["id"] for m in (await client.get("/router/v1/site/inventory")).json()["models"]]
    assert "copy" in ids
    assert (await client.post("/v1/chat/completions", json=chat("copy"))).status_code == 200

    r = await client.post(f"{ASSETS}/import", json={"id": "copy", "kcpps": doc})
    assert r.status_code == 409 and r.json()["error"]["param"] == "overwrite"
    r = await client.post(f"{ASSETS}/import", json={"id": "copy", "kcpps": doc, "overwrite": True})
    assert r.status_code == 200


async def test_resolve_finds_unhashed_files_under_the_roots(harness: RouterHarness) -> None:
    h = harness
    styled(h)
    client = await h.start(site_settings(h))
    doc = (await export(client, id="styled"))["kcpps"]
    moved = write(
        h.models_dir / "elsewhere" / "renamed.gguf", (h.models_dir / "l2.gguf").read_bytes()
    )
    (h.models_dir / "l2.gguf").unlink()  # the cached row no longer describes a file

    reads = count_reads(h)
    r = await client.post(f"{ASSETS}/resolve", json={"kcpps": doc})
    results = {(x["field"], x["position"]): x for x in r.json()["results"]}
    assert results[("model_param", None)]["source"] == "index"
    assert results[("lora", 1)]["source"] == "file_roots"
    assert results[("lora", 1)]["path"] == str(moved)
    assert str(moved.resolve()) in reads.reads
    assert r.json()["resolved"] is True

    r = await client.post(f"{ASSETS}/import", json={"id": "restyled", "kcpps": doc})
    assert r.status_code == 200, r.text
    written = json.loads((h.kcpps_dir / "restyled.kcpps").read_text())
    assert written["lora"] == [str(h.models_dir / "l1.gguf"), str(moved)]


async def test_unresolved_field_refuses_import_and_load(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    client = await h.start(site_settings(h))
    doc = (await export(client, id="chat"))["kcpps"]
    doc["model_param_hash"] = "0" * 64
    before = sorted(p.name for p in h.kcpps_dir.iterdir())

    r = await client.post(f"{ASSETS}/resolve", json={"kcpps": doc})
    (result,) = r.json()["results"]
    assert result["resolved"] is False and result["source"] is None and result["failure"]
    r = await client.post(f"{ASSETS}/import", json={"id": "ghost", "kcpps": doc})
    assert r.status_code == 409 and r.json()["error"]["param"] == "model_param"
    assert "model_param" in r.json()["error"]["message"]
    assert sorted(p.name for p in h.kcpps_dir.iterdir()) == before

    # Copied into config_dir unresolved: the catalog refuses it, naming the field.
    (h.kcpps_dir / "ghost.kcpps").write_text(json.dumps(doc))
    assert h.app is not None
    await h.app[CATALOG].refresh()
    errors = (await client.get("/router/v1/site/inventory")).json()["errors"]
    assert "model_param" in errors["ghost.kcpps"] and "not resolved" in errors["ghost.kcpps"]
    r = await client.post("/router/v1/load", json={"model": "ghost"})
    assert r.status_code == 404
    assert h.runtimes.views() == ()

    r = await client.post(f"{ASSETS}/resolve", json={"filename": "ghost.kcpps"})
    assert r.status_code == 200 and r.json()["resolved"] is False


async def test_resolve_batch_and_bad_documents(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    client = await h.start(site_settings(h))
    doc = (await export(client, id="chat"))["kcpps"]
    bad = {**doc, "model_param_hash": "0" * 64}
    r = await client.post(
        f"{ASSETS}/resolve-batch", json={"items": [{"kcpps": doc}, {"kcpps": bad}]}
    )
    assert [i["resolved"] for i in r.json()["items"]] == [True, False]
    for body, param in (
        ({"items": "x"}, "items"),
        ({"items": [1]}, "items"),
        ({"items": [{}] * 101}, "items"),
    ):
        r = await client.post(f"{ASSETS}/resolve-batch", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param
    for kcpps, param in (
        ({**doc, "model_param_hash": "ABC"}, "model_param"),
        ({**doc, "model_param_filename": "../x.gguf"}, "model_param"),
        ({"lora_hash": ["0" * 64], "lora_filename": []}, "lora"),
    ):
        r = await client.post(f"{ASSETS}/resolve", json={"kcpps": kcpps})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, kcpps
    for body, param in (
        ({"filename": "../router.yaml"}, "id"),
        ({"filename": "missing.kcpps"}, "filename"),
        ({"kcpps": []}, "kcpps"),
    ):
        r = await client.post(f"{ASSETS}/resolve", json=body)
        assert r.status_code in (400, 404) and r.json()["error"]["param"] == param, body
    r = await client.post(f"{ASSETS}/import", json={"id": "../x", "kcpps": doc})
    assert r.status_code == 400 and r.json()["error"]["param"] == "id"


async def test_asset_lookup_by_hash(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    client = await h.start(site_settings(h))
    await client.get("/router/v1/site/inventory")  # hashes the config's model file
    digest = sha(h.models_dir / "chat.gguf")
    r = await client.get(f"{ASSETS}/{digest}")
    assert r.json() == {
        "sha256": digest,
        "available": True,
        "filename": "chat.gguf",
        "size": 4,
        "origin": "local",
        "nodes": [{"node_id": "local", "paths": [str(h.models_dir / "chat.gguf")]}],
    }
    r = await client.get(f"{ASSETS}/{'1' * 64}")
    assert r.json()["available"] is False and r.json()["nodes"] == []
    r = await client.get(f"{ASSETS}/{digest.upper()}")
    assert r.status_code == 400 and r.json()["error"]["param"] == "sha256"
    assert (await client.get(f"{ASSETS}/{digest}", params={"node_id": "x"})).status_code == 404
    assert (await client.post(f"{ASSETS}/substitute", json={})).status_code == 400
    assert (await client.get(f"{ASSETS}/export")).status_code == 405
