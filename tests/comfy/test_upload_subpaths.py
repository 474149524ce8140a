"""`/upload/image...` sub-paths are ComfyUI image routes per the contract. KoboldCpp has one
upload endpoint, so a sub-path (or a trailing slash) is the same upload: the router keeps its
copy and tees it to KoboldCpp's `/upload/image` (docs/decisions.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.harness import RouterHarness


@pytest.mark.parametrize("path", ["/upload/image/", "/upload/image/mask"])
async def test_upload_image_subpath_is_the_upload(
    harness: RouterHarness, tmp_path: Path, path: str
) -> None:
    record = tmp_path / "kobold.jsonl"
    harness.faults["kobold"] = f"--record-requests {record}"
    harness.model("vid", mode="kobold", sdmodel="ltx.safetensors")
    client = await harness.start()
    r = await client.post("/router/v1/load", json={"model": "vid-ltx"})
    assert r.status_code == 200, r.text
    files = {"image": ("ref.png", b"\x89PNG\r\n\x1a\n" + b"x" * 64, "image/png")}
    r = await client.post(path, files=files, data={"type": "input"})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "kcpp_img2img.jpg"  # KoboldCpp's answer, verbatim
    paths = [x.get("path") for x in harness.records(record)]
    assert "/upload/image" in paths, paths
