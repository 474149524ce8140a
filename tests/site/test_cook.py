"""Cook routes (router/api/site/configs.py, router/site/cook.py) on a real router, plus the
plan builder on plain values."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from router.appkeys import CATALOG, EVENTS
from router.config.kcpps import AUX_COMPONENTS
from router.domain import BackendMode
from router.site import cook
from tests.support.harness import RouterHarness
from tests.support.site_helpers import catalog_event, client, site_settings

COOK = "/router/v1/site/cook"


@pytest.fixture
async def h(harness: RouterHarness) -> RouterHarness:
    harness.model("chat")
    harness.model("sd", sdmodel="pic.safetensors")
    harness.model("emb", embeddingsmodel="e.gguf")
    await harness.start(site_settings(harness))
    return harness


def combo(h: RouterHarness, **extra: Any) -> dict[str, Any]:
    (h.models_dir / "pic2.safetensors").write_bytes(b"SAFE")
    return {
        "id": "combo",
        "components": [
            {"kind": "text", "source": "config", "model_id": "chat"},
            {
                "kind": "image",
                "source": "file",
                "file_path": str(h.models_dir / "pic2.safetensors"),
            },
        ],
        "options": {"contextsize": 4096},
        **extra,
    }


def codes(body: dict[str, Any]) -> dict[str | None, str]:
    return {f["field"]: f["code"] for f in body["validation"] if f["severity"] == "error"}


async def test_preview_plans_one_config_and_writes_nothing(h: RouterHarness) -> None:
    resp = await client(h).post(f"{COOK}/preview", json=combo(h))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["validation"] == []
    plan = body["plan"]
    assert {
        k: plan[k] for k in ("id", "public_id", "public_image_id", "requires_master_recipe")
    } == {
        "id": "combo",
        "public_id": "combo",
        "public_image_id": "combo-pic2",
        "requires_master_recipe": False,
    }
    (entry,) = plan["configs"]
    assert entry["node_id"] == "local" and entry["filename"] == "combo.kcpps"
    assert entry["kinds"] == ["image", "text"] and entry["sources"] == ["chat"]
    assert entry["would_overwrite"] is False and entry["reused"] is False
    assert body["options"] == {
        "model_param": str(h.models_dir / "chat.gguf"),
        "sdmodel": str(h.models_dir / "pic2.safetensors"),
        "contextsize": 4096,
    }
    assert not (h.kcpps_dir / "combo.kcpps").exists()


async def test_apply_writes_reloads_and_lists_both_ids(h: RouterHarness) -> None:
    assert h.app is not None
    async with h.app[EVENTS].subscribe() as queue:
        resp = await client(h).post(f"{COOK}/apply", json=combo(h))
        assert resp.status_code == 200, resp.text
        await catalog_event(queue, lambda e: "combo" in e["added"])
    assert resp.json()["written"] is True
    assert json.loads((h.kcpps_dir / "combo.kcpps").read_text()) == resp.json()["options"]
    models = (await client(h).get("/v1/models")).json()["data"]
    assert "combo" in [m["id"] for m in models]
    assert h.app[CATALOG].resolve("combo-pic2") is not None
    again = await client(h).post(f"{COOK}/preview", json=combo(h))
    assert again.json()["plan"]["configs"][0]["reused"] is True
    resp = await client(h).post(f"{COOK}/apply", json=combo(h))
    assert resp.status_code == 409


async def test_bad_components_are_findings_and_apply_writes_nothing(h: RouterHarness) -> None:
    outside = h.tmp / "outside"
    outside.mkdir()
    os.mkfifo(outside / "pipe.gguf")  # opening it would block: proves the file is never read
    components = [
        {"kind": "text", "source": "config", "model_id": "../chat"},
        {"kind": "video", "source": "config", "model_id": "chat"},
        {"kind": "voice", "source": "file", "file_path": str(outside / "pipe.gguf")},
        {"kind": "text", "model_id": "chat", "node_url": "http://10.0.0.9:8080"},
        {"kind": "music", "source": "config", "model_id": "nope"},
        {"kind": "embeddings", "model_id": "emb", "node_id": "other-node"},
        {"kind": "image", "source": "file", "file_path": str(h.models_dir / "absent.safetensors")},
        {"kind": "image", "source": "disk", "file_path": "x"},
        {"kind": "image", "model_id": "chat"},
    ]
    body = {"id": "mix", "components": components, "options": {}}
    resp = await client(h).post(f"{COOK}/preview", json=body)
    assert resp.status_code == 200, resp.text
    assert codes(resp.json()) == {
        "components[0].model_id": "path_like_id",
        "components[1].kind": "unknown_kind",
        "components[2].file_path": "outside_file_roots",
        "components[3].node_url": "node_url_override",
        "components[4].model_id": "unknown_model",
        "components[5].node_id": "unknown_node",
        "components[6].file_path": "missing_file",
        "components[7].source": "unknown_source",
        "components[8].kind": "missing_component",
    }
    before = sorted(os.listdir(h.kcpps_dir))
    resp = await client(h).post(f"{COOK}/apply", json=body)
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "components[0].model_id"
    assert sorted(os.listdir(h.kcpps_dir)) == before


@pytest.mark.parametrize(
    ("mode", "components", "field", "code"),
    [
        (
            "vllm",
            [{"kind": "text", "model_id": "chat"}, {"kind": "image", "model_id": "sd"}],
            "components[1].kind",
            "mode_cannot_serve",
        ),
        (
            "kobold",
            [{"kind": "image", "model_id": "sd"}, {"kind": "embeddings", "model_id": "emb"}],
            "components",
            "kobold_image_embeddings",
        ),
        (
            "llama_sdcpp",
            [{"kind": "music", "source": "file", "file_path": "MODELS/m.gguf"}],
            "components[0].kind",
            "mode_cannot_serve",
        ),
        (
            "llama_sdcpp",
            [{"kind": "text", "model_id": "chat"}, {"kind": "text", "model_id": "emb"}],
            "components[1].kind",
            "missing_component",
        ),
        (
            "llama_sdcpp",
            [{"kind": "text", "model_id": "chat"}, {"kind": "text", "model_id": "chat"}],
            "components[1]",
            "duplicate_component",
        ),
    ],
)
async def test_a_mix_the_backend_mode_cannot_serve_is_refused(
    h: RouterHarness, mode: str, components: list[dict[str, Any]], field: str, code: str
) -> None:
    (h.models_dir / "m.gguf").write_bytes(b"GGUF")
    for c in components:
        if "file_path" in c:
            c["file_path"] = c["file_path"].replace("MODELS", str(h.models_dir))
    body = {"id": "mix", "components": components, "options": {"backend_mode": mode}}
    resp = await client(h).post(f"{COOK}/preview", json=body)
    assert codes(resp.json()).get(field) == code, resp.json()["validation"]
    resp = await client(h).post(f"{COOK}/apply", json=body)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == field
    assert not (h.kcpps_dir / "mix.kcpps").exists()


async def test_options_are_screened_like_config_files(h: RouterHarness) -> None:
    body = combo(h, options={"onready": "curl evil", "port": 1, "threads": 100_000})
    resp = await client(h).post(f"{COOK}/preview", json=body)
    found = {f["field"]: f["code"] for f in resp.json()["validation"]}
    assert found["options.onready"] == "refused_key"
    assert found["options.port"] == "router_owned_key"
    assert found["options.threads"] == "thread_budget"
    assert "onready" not in resp.json()["options"]
    body["options"].pop("threads")
    resp = await client(h).post(f"{COOK}/apply", json=body)
    assert resp.status_code == 200, resp.text
    text = (h.kcpps_dir / "combo.kcpps").read_text()
    assert "onready" not in text and "port" not in text


@pytest.mark.parametrize("cook_id", ["../x", "a/b", "/abs", "%2e%2e", "x\x00", "x\ty", ""])
async def test_cook_ids_must_be_plain_names(h: RouterHarness, cook_id: str) -> None:
    before = sorted(os.listdir(h.kcpps_dir)), sorted(os.listdir(h.tmp))
    resp = await client(h).post(f"{COOK}/apply", json=combo(h, id=cook_id))
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "id"
    assert (sorted(os.listdir(h.kcpps_dir)), sorted(os.listdir(h.tmp))) == before


async def test_unknown_node_is_404(h: RouterHarness) -> None:
    resp = await client(h).post(f"{COOK}/apply", json=combo(h, node_id="elsewhere"))
    assert resp.status_code == 404 and resp.json()["error"]["param"] == "node_id"
    assert (await client(h).delete(f"{COOK}/chat", params={"node_id": "x"})).status_code == 404
    assert (await client(h).get(f"{COOK}/preview")).status_code == 405


async def test_delete_takes_only_what_cook_wrote(h: RouterHarness) -> None:
    assert h.app is not None
    assert (await client(h).post(f"{COOK}/apply", json=combo(h))).status_code == 200
    resp = await client(h).delete(f"{COOK}/chat")  # written by hand
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "not_cooked"
    assert (h.kcpps_dir / "chat.kcpps").exists()
    async with h.app[EVENTS].subscribe() as queue:
        resp = await client(h).delete(f"{COOK}/combo")
        assert resp.status_code == 200, resp.text
        assert resp.json()["deleted"] is True
        await catalog_event(queue, lambda e: e["removed"] == ["combo"])
    assert not (h.kcpps_dir / "combo.kcpps").exists()
    assert (await client(h).delete(f"{COOK}/combo")).status_code == 404


async def test_a_cooked_file_edited_afterwards_is_not_deleted_by_cook(h: RouterHarness) -> None:
    assert (await client(h).post(f"{COOK}/apply", json=combo(h))).status_code == 200
    path = h.kcpps_dir / "combo.kcpps"
    path.write_text(path.read_text().replace("4096", "8192"))
    resp = await client(h).delete(f"{COOK}/combo")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "edited"
    assert path.exists()
    resp = await client(h).delete("/router/v1/site/config-file", params={"id": "combo"})
    assert resp.status_code == 200
    assert not (h.kcpps_dir / ".cook" / "combo.json").exists()


# ---- the plan builder on plain values -------------------------------------------------------------


def test_every_auxiliary_file_belongs_to_one_kind() -> None:
    kinds = [k for keys in cook.AUX_KEYS.values() for k in keys]
    assert sorted(kinds) == sorted(AUX_COMPONENTS)


def test_probe_needs_roots_and_follows_symlinks(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "m.gguf").write_bytes(b"GGUF")
    (root / "link.gguf").symlink_to(outside / "m.gguf")
    (root / "ok.gguf").write_bytes(b"GGUF")
    assert cook.probe_model_file(str(root / "ok.gguf"), ())[0] == "no_file_roots"
    assert cook.probe_model_file(str(root / "ok.gguf"), (root,)) == ("ok", str(root / "ok.gguf"))
    assert cook.probe_model_file(str(root / "link.gguf"), (root,))[0] == "outside_file_roots"
    assert (
        cook.probe_model_file(str(root / "../outside/m.gguf"), (root,))[0] == "outside_file_roots"
    )
    assert cook.probe_model_file(str(root / "none.gguf"), (root,))[0] == "missing_file"


def test_build_reports_without_raising_on_junk() -> None:
    def never(_: str) -> Any:
        raise AssertionError("not consulted")

    for components in (None, [], "text", {"kind": "text"}):
        plan = cook.plan_cook(
            components,
            {},
            node_id="n",
            default_mode=BackendMode.KOBOLD,
            resolve=never,
            probe=never,
            cpu_count=4,
        )
        assert [f.code for f in plan.findings] == ["no_components"]
    plan = cook.plan_cook(
        [1, {"kind": ["text"]}],
        {},
        node_id="n",
        default_mode=BackendMode.KOBOLD,
        resolve=never,
        probe=never,
        cpu_count=4,
    )
    assert [f.code for f in plan.findings] == ["invalid_component", "unknown_kind"]
