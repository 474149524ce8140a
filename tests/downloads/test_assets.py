"""`model-assets/candidates` and `model-assets/bind` against the fake hub: a hash finds the
hub files that carry it; a bind pins it only when the commit resolves and the LFS hash matches."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from tests.fakes.fake_hub import COMMIT, FakeHub
from tests.support.download_helpers import download_settings
from tests.support.harness import RouterHarness
from tests.support.site_helpers import site_settings

ASSETS = "/router/v1/site/model-assets"


def _sha(hub: FakeHub, path: str) -> str:
    return hashlib.sha256(hub.repos["acme/tiny"].files[path]).hexdigest()


async def test_candidates_find_the_file_by_hash(harness: RouterHarness, hub: FakeHub) -> None:
    client = await harness.start(download_settings(harness, hub))
    sha = _sha(hub, "weights/model.gguf")
    # the stem "tiny-Q4_K_M" finds nothing; without its quant tag "tiny" finds acme/tiny
    r = await client.post(
        f"{ASSETS}/candidates", json={"sha256": sha, "filename": "tiny-Q4_K_M.gguf"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["candidates"] == [
        {
            "repository": "acme/tiny",
            "commit": COMMIT,
            "path": "weights/model.gguf",
            "size": len(hub.repos["acme/tiny"].files["weights/model.gguf"]),
            "hf": f"hf://acme/tiny@{COMMIT}/weights/model.gguf",
        }
    ]
    assert body["learned"] is None
    none = await client.post(
        f"{ASSETS}/candidates", json={"sha256": "0" * 64, "filename": "tiny.gguf"}
    )
    assert none.json()["candidates"] == []
    bad = await client.post(f"{ASSETS}/candidates", json={"sha256": "xyz", "filename": "a.gguf"})
    assert bad.status_code == 400


async def test_bind_checks_commit_path_and_hash_then_is_learned(
    harness: RouterHarness, hub: FakeHub
) -> None:
    client = await harness.start(download_settings(harness, hub))
    sha = _sha(hub, "weights/model.gguf")
    base = {
        "sha256": sha,
        "repository": "acme/tiny",
        "repository_path": "weights/model.gguf",
        "commit": COMMIT,
    }
    for change, status in (
        ({"commit": "1" * 40}, 404),
        ({"repository_path": "big.gguf"}, 409),
        ({"repository_path": "config.json"}, 409),
        ({"repository_path": "../x"}, 400),
        ({"commit": "main"}, 400),
    ):
        r = await client.post(f"{ASSETS}/bind", json={**base, **change})
        assert r.status_code == status, (change, r.text)
    r = await client.post(f"{ASSETS}/bind", json=base)
    assert r.status_code == 200, r.text
    assert r.json()["hf"] == f"hf://acme/tiny@{COMMIT}/weights/model.gguf"
    learned = await client.post(f"{ASSETS}/candidates", json={"sha256": sha, "filename": "x.gguf"})
    assert learned.json()["learned"] == r.json()["hf"]


async def _asset_job(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    r = await client.post(f"{ASSETS}/jobs", json=body)
    assert r.status_code == 202, r.text
    end = time.monotonic() + 30
    while True:
        job = (await client.get(f"{ASSETS}/jobs/{r.json()['id']}")).json()
        if job["state"] != "running" or time.monotonic() > end:
            return job
        await asyncio.sleep(0.05)


async def test_asset_jobs_fetch_what_the_node_lacks_then_import_resolves(
    harness: RouterHarness, hub: FakeHub
) -> None:
    library = harness.tmp / "library"
    settings = download_settings(harness, hub)
    models = settings.models.model_copy(update={"file_roots": (harness.models_dir, library)})
    client = await harness.start(settings.model_copy(update={"models": models}))
    sha = _sha(hub, "weights/model.gguf")
    doc = {
        "model_param_hash": sha,
        "model_param_filename": "model.gguf",
        "model_param_hf": f"hf://acme/tiny@{COMMIT}/weights/model.gguf",
    }
    job = await _asset_job(client, {"kcpps": doc, "id": "fetched"})
    (field,) = job["fields"]
    assert job["state"] == "resolved" and field["source"] == "hf:pinned", job
    assert field["path"] == str(library / "acme/tiny/weights/model.gguf")
    r = await client.post(f"{ASSETS}/import", json={"id": "fetched", "kcpps": doc})
    assert r.status_code == 200, r.text
    assert (
        json.loads((harness.kcpps_dir / "fetched.kcpps").read_text())["model_param"]
        == field["path"]
    )


async def test_asset_jobs_use_learned_origins_and_refuse_a_wrong_hash(
    harness: RouterHarness, hub: FakeHub
) -> None:
    client = await harness.start(download_settings(harness, hub))
    sha = _sha(hub, "big.gguf")
    bound = await client.post(
        f"{ASSETS}/bind",
        json={
            "sha256": sha,
            "repository": "acme/tiny",
            "repository_path": "big.gguf",
            "commit": COMMIT,
        },
    )
    assert bound.status_code == 200
    job = await _asset_job(
        client, {"kcpps": {"model_param_hash": sha, "model_param_filename": "big.gguf"}}
    )
    assert job["state"] == "resolved" and job["fields"][0]["source"] == "hf:learned", job
    wrong = {
        "model_param_hash": "2" * 64,
        "model_param_filename": "model.gguf",
        "model_param_hf": f"hf://acme/tiny@{COMMIT}/weights/model.gguf",
    }
    job = await _asset_job(client, {"kcpps": wrong})
    assert job["state"] == "failed" and "LFS SHA-256" in job["fields"][0]["failure"], job
    job = await _asset_job(
        client, {"kcpps": {"model_param_hash": "3" * 64, "model_param_filename": "zzz.gguf"}}
    )
    assert job["state"] == "failed" and "0 hub candidates" in job["fields"][0]["failure"]
    assert (await client.get(f"{ASSETS}/jobs/unknown")).status_code == 404


async def test_substitute_points_a_field_at_another_file_by_hash(harness: RouterHarness) -> None:
    h = harness
    h.model("chat")
    other = h.models_dir / "chat-q8.gguf"
    other.write_bytes(b"GGUF-other-quant")
    client = await h.start(site_settings(h))
    old_sha = hashlib.sha256(b"GGUF").hexdigest()
    new_sha = hashlib.sha256(other.read_bytes()).hexdigest()
    body = {"id": "chat", "field": "model_param", "expected_sha256": old_sha, "sha256": new_sha}
    preview = await client.post(f"{ASSETS}/substitute", json=body)
    assert preview.status_code == 200, preview.text
    assert preview.json()["written"] is False and preview.json()["to"] == "chat-q8.gguf"
    assert json.loads((h.kcpps_dir / "chat.kcpps").read_text())["model_param"].endswith("chat.gguf")
    for change, status in (
        ({"expected_sha256": "1" * 64}, 409),
        ({"sha256": "2" * 64}, 409),
        ({"field": "sdmodel"}, 404),
        ({"position": -1}, 400),
    ):
        r = await client.post(f"{ASSETS}/substitute", json={**body, **change, "confirm": True})
        assert r.status_code == status, (change, r.text)
    done = await client.post(f"{ASSETS}/substitute", json={**body, "confirm": True})
    assert done.status_code == 200 and done.json()["written"] is True, done.text
    assert json.loads((h.kcpps_dir / "chat.kcpps").read_text())["model_param"] == str(other)
    stale = await client.post(f"{ASSETS}/substitute", json={**body, "confirm": True})
    assert stale.status_code == 409  # the field now holds the other file
