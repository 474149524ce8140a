"""`model-assets/candidates` and `model-assets/bind` against the fake hub: a hash finds the
hub files that carry it; a bind pins it only when the commit resolves and the LFS hash matches."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.download_helpers import download_settings, hub_fixture
from tests.fakes.fake_hub import COMMIT, FakeHub
from tests.harness import RouterHarness, harness_fixture

ASSETS = "/router/v1/site/model-assets"


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[RouterHarness]:
    async for h in harness_fixture(tmp_path):
        yield h


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    async for h in hub_fixture():
        yield h


def _sha(hub: FakeHub, path: str) -> str:
    return hashlib.sha256(hub.repos["acme/tiny"].files[path]).hexdigest()


async def test_candidates_find_the_file_by_hash(harness: RouterHarness, hub: FakeHub) -> None:
    client = await harness.start(download_settings(harness, hub))
    sha = _sha(hub, "weights/model.gguf")
    # the stem "tiny-Q4_K_M" finds nothing; without its quant tag "tiny" finds acme/tiny
    r = await client.post(f"{ASSETS}/candidates", json={"sha256": sha, "filename": "tiny-Q4_K_M.gguf"})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["candidates"] == [{"repository": "acme/tiny", "commit": COMMIT, "path": "weights/model.gguf",
                                   "size": len(hub.repos["acme/tiny"].files["weights/model.gguf"]),
                                   "hf": f"hf://acme/tiny@{COMMIT}/weights/model.gguf"}]  # fmt: skip
    assert body["learned"] is None
    none = await client.post(f"{ASSETS}/candidates", json={"sha256": "0" * 64, "filename": "tiny.gguf"})  # fmt: skip
    assert none.json()["candidates"] == []
    bad = await client.post(f"{ASSETS}/candidates", json={"sha256": "xyz", "filename": "a.gguf"})
    assert bad.status_code == 400


async def test_bind_checks_commit_path_and_hash_then_is_learned(harness: RouterHarness, hub: FakeHub) -> None:  # fmt: skip
    client = await harness.start(download_settings(harness, hub))
    sha = _sha(hub, "weights/model.gguf")
    base = {"sha256": sha, "repository": "acme/tiny", "repository_path": "weights/model.gguf", "commit": COMMIT}  # fmt: skip
    for change, status in (({"commit": "1" * 40}, 404), ({"repository_path": "big.gguf"}, 409),
                           ({"repository_path": "config.json"}, 409), ({"repository_path": "../x"}, 400),
                           ({"commit": "main"}, 400)):  # fmt: skip
        r = await client.post(f"{ASSETS}/bind", json={**base, **change})
        assert r.status_code == status, (change, r.text)
    r = await client.post(f"{ASSETS}/bind", json=base)
    assert r.status_code == 200, r.text
    assert r.json()["hf"] == f"hf://acme/tiny@{COMMIT}/weights/model.gguf"
    learned = await client.post(f"{ASSETS}/candidates", json={"sha256": sha, "filename": "x.gguf"})
    assert learned.json()["learned"] == r.json()["hf"]
