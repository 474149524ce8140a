"""A configuration whose model file is missing: listed as `missing files`, and a load of it is
refused at once naming the file, never launched (and never evicting what runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router.config import parse_kcpps
from router.config.availability import missing_files, needed_files
from router.domain import BackendMode, Lane
from tests.support.harness import RouterHarness, chat

pytestmark = pytest.mark.timeout(60)


def test_needed_files_follow_the_lanes(tmp_path: Path) -> None:
    raw = {
        "model_param": "t.gguf",
        "mmproj": "p.gguf",
        "sdmodel": "s.safetensors",
        "sdvae": "v.safetensors",
        "whispermodel": "w.bin",
    }
    config = parse_kcpps(tmp_path / "c.kcpps", json.dumps(raw).encode(), BackendMode.LLAMA_SDCPP)
    assert set(needed_files(config, {Lane.TEXT})) == {"model_param", "mmproj"}
    assert set(needed_files(config, {Lane.IMAGE})) == {"sdmodel", "sdvae"}
    (tmp_path / "t.gguf").write_bytes(b"GGUF")
    assert set(missing_files(config, {Lane.TEXT})) == {"mmproj"}
    assert missing_files(config, {Lane.VOICE})["whispermodel"].name == "w.bin"


async def test_missing_model_file_is_listed_and_refused_at_once(harness: RouterHarness) -> None:
    harness.model("alpha")
    (harness.kcpps_dir / "ghost.kcpps").write_text(
        json.dumps({"backend_mode": "llama_sdcpp", "model_param": "gone-q4.gguf"})
    )
    client = await harness.start()
    listed = {m["id"]: m for m in (await client.get("/v1/models")).json()["data"]}
    assert listed["ghost"]["status"] == "missing files"
    assert listed["alpha"]["status"] == "unloaded"
    record = {m["id"]: m for m in (await client.get("/router/v1/models")).json()["data"]}
    assert record["ghost"]["status"] == "missing files"
    assert record["ghost"]["missing_files"] == ["model_param"]
    assert (await client.post("/v1/chat/completions", json=chat("alpha"))).status_code == 200
    r = await client.post("/v1/chat/completions", json=chat("ghost"))
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert "gone-q4.gguf" in error["message"] and error["code"] == "model_files_missing"
    assert str(harness.kcpps_dir) not in error["message"]  # the file's name, not its path
    r = await client.post("/router/v1/load", json={"model": "ghost"})
    assert r.status_code == 409 and "gone-q4.gguf" in r.text
    assert harness.runtimes.spawn_count == 1  # never launched
    assert harness.runtimes.status_of("alpha") == "ready"  # and nothing was evicted for it
