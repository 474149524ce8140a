"""The routes the router answers from the catalog alone, the CLI, and S25/S26 at the app edge."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner

from router.app import create_app
from router.cli import main
from router.config import Settings

REPO = Path(__file__).resolve().parents[1]


def write_configs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    models = folder.parent / "models"
    models.mkdir(exist_ok=True)
    (models / "chat.gguf").write_bytes(b"GGUF")
    (folder / "chat.kcpps").write_text(json.dumps({"model_param": str(models / "chat.gguf")}))
    (folder / "embed.kcpps").write_text(json.dumps({"embeddingsmodel": "missing-embed.gguf"}))
    (folder / "sdxl.kcpps").write_text(json.dumps({"sdmodel": "juggernautXL.safetensors"}))
    (folder / "broken.kcpps").write_text("{not json")


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient]:
    write_configs(tmp_path / "kcpps")
    settings = Settings.model_validate(
        {
            "models": {"config_dir": tmp_path / "kcpps"},
            "analytics": {"database_path": tmp_path / "data" / "router.sqlite"},
        }
    )
    server = TestServer(create_app(settings), host="127.0.0.1", handler_cancellation=True)
    async with TestClient(server) as test_client:
        yield test_client


async def test_openai_model_list_has_text_ids_only(client: TestClient) -> None:
    body = await (await client.get("/v1/models")).json()
    assert body["object"] == "list"
    ids = [m["id"] for m in body["data"]]
    assert ids == ["chat", "embed"]
    assert all(m["object"] == "model" for m in body["data"])
    # embed.kcpps names a file that is not there (docs/kcpps.md, "Missing files").
    assert {m["id"]: m["status"] for m in body["data"]} == {
        "chat": "unloaded",
        "embed": "missing files",
    }


async def test_sd_models_lists_image_ids(client: TestClient) -> None:
    body = await (await client.get("/sdapi/v1/sd-models")).json()
    assert [m["title"] for m in body] == ["sdxl-juggernautXL"]


async def test_router_models_records(client: TestClient) -> None:
    body = await (await client.get("/router/v1/models")).json()
    records = {r["id"]: r for r in body["data"]}
    assert set(records) == {"chat", "embed", "sdxl"}
    assert records["chat"]["capabilities"] == ["text"]
    assert records["chat"]["available"] is True
    assert records["embed"]["available"] is False
    assert records["sdxl"]["image_id"] == "sdxl-juggernautXL"
    assert len(records["chat"]["hashes"]["config"]) == 64
    assert "broken.kcpps" in body["errors"]
    assert "/" not in json.dumps(body["errors"]).replace("\\/", "")  # no paths in errors


async def test_health_and_ollama_catalog_routes(client: TestClient) -> None:
    assert (await (await client.get("/health")).json()) == {"status": "ok"}
    tags = await (await client.get("/api/tags")).json()
    assert [m["name"] for m in tags["models"]] == ["chat", "embed"]
    assert "version" in await (await client.get("/api/version")).json()
    assert (await (await client.get("/api/ps")).json()) == {"models": []}


async def test_disabled_model_disappears_and_404s(client: TestClient) -> None:
    r = await client.post("/router/v1/site/models/state", json={"model": "chat", "disabled": True})
    assert r.status == 200
    ids = [m["id"] for m in (await (await client.get("/v1/models")).json())["data"]]
    assert "chat" not in ids
    r = await client.post("/v1/chat/completions", json={"model": "chat", "messages": []})
    assert r.status == 404
    assert (await r.json())["error"]["message"] == 'model "chat" was not found'
    r = await client.post("/api/chat", json={"model": "chat", "messages": []})
    assert r.status == 404 and (await r.json()) == {"error": 'model "chat" was not found'}
    await client.post("/router/v1/site/models/state", json={"model": "chat", "disabled": False})
    ids = [m["id"] for m in (await (await client.get("/v1/models")).json())["data"]]
    assert "chat" in ids


async def test_unknown_path_404_and_wrong_method_405(client: TestClient) -> None:
    r = await client.get("/no/such/path")
    assert r.status == 404
    r = await client.get("/v1/chat/completions")
    assert r.status == 405 and r.headers["Allow"] == "POST"
    r = await client.get("/api/chat")
    assert r.status == 405 and "error" in await r.json()


@pytest.mark.parametrize(
    "body",
    [
        b"[1, 2]",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"model": "chat", "x": "\xff\xfe"}',
        b'{"model": {"nested": 1}}',
        b'{"model": 7}',
        b"not json at all",
    ],
    ids=["non-object", "deep", "bad-utf8", "model-object", "model-number", "garbage"],
)
async def test_s26_hostile_json_is_a_fast_400(client: TestClient, body: bytes) -> None:
    r = await client.post(
        "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    assert r.status == 400
    assert (await r.json())["error"]["type"] == "invalid_request_error"


async def test_s26_duplicate_model_keys_last_wins(client: TestClient) -> None:
    r = await client.post(
        "/v1/chat/completions",
        data=b'{"model": "chat", "model": "nope"}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status == 404 and "nope" in (await r.json())["error"]["message"]


async def test_s25_load_error_has_no_absolute_path(client: TestClient, tmp_path: Path) -> None:
    r = await client.post("/v1/embeddings", json={"model": "embed", "input": "x"})
    text = await r.text()
    assert r.status >= 400
    assert str(tmp_path) not in text
    assert len((await r.json())["error"]["message"].encode()) <= 512


def test_check_config_names_key_and_file_of_a_broken_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "router.yaml"
    (tmp_path / "kcpps").mkdir()
    bad.write_text("models:\n  config_dir: ./kcpps\nruntime:\n  load_timeout: soon\n")
    result = CliRunner().invoke(main, ["check-config", "--config", str(bad)])
    assert result.exit_code != 0
    assert "runtime.load_timeout" in result.output and "router.yaml" in result.output


def test_check_config_refuses_an_unknown_router_key(tmp_path: Path) -> None:
    (tmp_path / "kcpps").mkdir()
    (tmp_path / "kcpps" / "chat.kcpps").write_text(
        json.dumps({"model_param": "chat.gguf", "router_kv_persit": "off"})
    )
    yaml = tmp_path / "router.yaml"
    yaml.write_text("models:\n  config_dir: ./kcpps\n")
    result = CliRunner().invoke(main, ["check-config", "--config", str(yaml)])
    assert result.exit_code == 1
    assert "chat" in result.output and "router_kv_persit is not a router key" in result.output
    assert "router_kv_persist, router_pin" in result.output  # the known keys are listed


def test_check_config_accepts_the_example() -> None:
    result = CliRunner().invoke(
        main, ["check-config", "--config", str(REPO / "configs" / "router.example.yaml")]
    )
    assert result.exit_code == 0, result.output


def test_cli_models_and_version() -> None:
    result = CliRunner().invoke(
        main, ["models", "--config", str(REPO / "configs" / "router.example.yaml")]
    )
    assert result.exit_code == 0 and "hermes-8k" in result.output
    out = subprocess.run(
        [sys.executable, "-m", "router.cli", "version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip()
