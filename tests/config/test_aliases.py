"""`.kcpps` `router_aliases`: extra public names resolved wherever a model is named, listed
where models are listed, refused when two configurations claim one name (docs/kcpps.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from router.config import Catalog, KcppsError, parse_kcpps
from router.domain import BackendMode
from tests.support.harness import RouterHarness, chat, wav_bytes

pytestmark = pytest.mark.timeout(60)


def parse(tmp_path: Path, **raw: Any):
    path = tmp_path / "chat.kcpps"
    return parse_kcpps(
        path, json.dumps({"model_param": "m.gguf", **raw}).encode(), BackendMode.LLAMA_SDCPP
    )


def test_aliases_are_parsed_and_checked(tmp_path: Path) -> None:
    config = parse(tmp_path, router_aliases=["gpt-4o-mini", "llama3:8b", "org/model"])
    assert config.aliases == ("gpt-4o-mini", "llama3:8b", "org/model")
    assert config.names == ("chat", "gpt-4o-mini", "llama3:8b", "org/model")
    assert parse(tmp_path).aliases == ()
    for bad in ("gpt 4", "", "-x", 3, "a" * 129):
        with pytest.raises(KcppsError, match="router_aliases"):
            parse(tmp_path, router_aliases=[bad])
    with pytest.raises(KcppsError, match="twice"):
        parse(tmp_path, router_aliases=["x", "x"])
    with pytest.raises(KcppsError, match="twice"):
        parse(tmp_path, router_aliases=["chat"])
    with pytest.raises(KcppsError, match="list"):
        parse(tmp_path, router_aliases="gpt-4o")


async def test_two_configs_claiming_one_name_are_refused(tmp_path: Path, cat: Catalog) -> None:
    (tmp_path / "a.kcpps").write_text(
        json.dumps({"model_param": "a.gguf", "router_aliases": ["gpt-4o-mini"]})
    )
    (tmp_path / "b.kcpps").write_text(
        json.dumps({"model_param": "b.gguf", "router_aliases": ["gpt-4o-mini", "other"]})
    )
    await cat.refresh()
    assert [c.id for c in cat.all_configs()] == ["a"]
    error = cat.errors["b.kcpps"]
    assert "'gpt-4o-mini'" in error and "a.kcpps" in error and "b.kcpps" in error
    assert cat.resolve("gpt-4o-mini") is cat.resolve("a") and cat.resolve("other") is None
    # An alias may not take another file's ID either.
    (tmp_path / "c.kcpps").write_text(
        json.dumps({"model_param": "c.gguf", "router_aliases": ["a"]})
    )
    await cat.refresh()
    assert "'a'" in cat.errors["c.kcpps"] and cat.resolve("c") is None


async def test_aliases_through_the_router(harness: RouterHarness) -> None:
    harness.model("alpha", router_aliases=["gpt-4o-mini"])
    harness.model("whisper", whispermodel="w.bin", router_aliases=["whisper-1"])
    harness.model("art", sdmodel="art.safetensors", router_aliases=["dall-e-3"])
    client = await harness.start()
    ids = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
    assert "alpha" in ids and "gpt-4o-mini" in ids
    one = await client.get("/v1/models/gpt-4o-mini")
    assert one.status_code == 200 and one.json()["id"] == "gpt-4o-mini"
    r = await client.post("/v1/chat/completions", json=chat("gpt-4o-mini"))
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "gpt-4o-mini"  # the name the client used
    assert harness.runtimes.status_of("alpha") == "ready"
    r = await client.post(
        "/v1/audio/transcriptions",
        files={"file": ("a.wav", wav_bytes(), "audio/wav")},
        data={"model": "whisper-1"},
    )
    assert r.status_code == 200, r.text
    assert harness.runtimes.status_of("whisper") == "ready"
    titles = [m["title"] for m in (await client.get("/sdapi/v1/sd-models")).json()]
    assert "art-art" in titles and "dall-e-3" in titles
    r = await client.post("/v1/images/generations", json={"prompt": "x", "model": "dall-e-3"})
    assert r.status_code == 200, r.text
    records = {m["id"]: m for m in (await client.get("/router/v1/models")).json()["data"]}
    assert records["alpha"]["aliases"] == ["gpt-4o-mini"]
    assert records["whisper"]["aliases"] == ["whisper-1"]


def test_aliases_never_reach_koboldcpp(tmp_path: Path) -> None:
    from backends.kobold import launch_config
    from router.domain import Lane

    config = parse(tmp_path, backend_mode="kobold", router_aliases=["gpt-4o-mini"])
    assert "router_aliases" not in launch_config(config, Lane.TEXT)
