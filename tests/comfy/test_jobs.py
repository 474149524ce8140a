"""ComfyUI routes end to end: a real router, fake sd-server / KoboldCpp, real ffmpeg.

Covers video jobs on both backend modes (submission, /history polling, MP4 checked with
ffprobe, ranged /view), still-image pass-through, uploads (KoboldCpp tee), and the
reliability rows S6, S10, S11, S12, S13.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.appkeys import COMFY
from router.comfy.serve import Unsatisfiable, parse_range
from router.comfy.transcode import container_of, transcode_argv
from router.media import ffmpeg as media_ffmpeg
from tests.fakes.fake_backend import KOBOLD_PROMPT_ID, tiny_png
from tests.support.comfy import form, n, still_workflow, video_workflow, wait_done
from tests.support.harness import RouterHarness


@pytest.fixture(autouse=True)
def _ffmpeg_installed() -> None:
    # The video path is tested with real ffmpeg; a machine without it fails rather than skips.
    if shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None:
        pytest.fail("ffmpeg and ffprobe are needed: `make test` installs Debian's ffmpeg")


PNG = tiny_png(16, 16)
WAV = b"RIFF" + (36).to_bytes(4, "little") + b"WAVEfmt " + bytes(28)


async def start(h: RouterHarness, mode: str, record: Path) -> tuple[httpx.AsyncClient, str]:
    family = "kobold" if mode == "kobold" else "sdcpp"
    h.faults[family] = f"--record-requests {record}"
    h.model("vid", mode=mode, sdmodel="ltx.safetensors")
    client = await h.start()
    r = await client.post("/router/v1/load", json={"model": "vid-ltx"})
    assert r.status_code == 200, r.text
    return client, "vid-ltx"


def streams(path: Path) -> dict[str, str]:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name", "-of", "json"]
        + [str(path)],
        capture_output=True,
        check=True,
        timeout=30,
    )
    return {s["codec_type"]: s["codec_name"] for s in json.loads(out.stdout)["streams"]}


def records(path: Path, route: str, key: str = "body") -> list[dict[str, Any]]:
    """What the fake backend noted about `route` (its generic per-request lines lack `key`)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r.get("path") == route and key in r]


async def run_video(client: httpx.AsyncClient, wf: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    r = await client.post("/prompt", json={"prompt": wf, "client_id": "t"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["node_errors"] == {} and isinstance(body["number"], int)
    entry = await wait_done(client, body["prompt_id"])
    assert entry["status"]["status_str"] == "success", entry
    return body["prompt_id"], entry


async def check_view(client: httpx.AsyncClient, gif: dict[str, Any], tmp: Path) -> bytes:
    """The MP4 is H.264 + AAC, served as video/mp4 with nosniff, and ranges work (S13)."""
    params = {"filename": gif["filename"], "subfolder": gif["subfolder"], "type": gif["type"]}
    r = await client.get("/view", params=params)
    assert r.status_code == 200
    assert r.headers["content-type"] == "video/mp4"
    assert r.headers["x-content-type-options"] == "nosniff"
    data = r.content
    (tmp / "out.mp4").write_bytes(data)
    assert streams(tmp / "out.mp4") == {"video": "h264", "audio": "aac"}
    size = len(data)
    cases = {
        "bytes=0-99": (206, data[:100]),
        "bytes=-10": (206, data[-10:]),
        f"bytes={size - 5}-{size + 100}": (206, data[-5:]),
        "bytes=5-2": (200, data),  # invalid: ignored
        "pages=0-1": (200, data),
        "bytes=abc": (200, data),
        "bytes=" + ",".join(["0-"] * 1000): (200, data),  # many overlapping: one copy
        "bytes=0-0,5-9": (200, data),
    }
    for header, (status, expected) in cases.items():
        r = await client.get("/view", params=params, headers={"Range": header})
        assert (r.status_code, r.content) == (status, expected), header
    r = await client.get("/view", params=params, headers={"Range": "bytes=0-99"})
    assert r.headers["content-range"] == f"bytes 0-99/{size}"
    r = await client.head("/view", params=params)
    assert (r.status_code, r.headers["content-length"], r.content) == (200, str(size), b"")
    r = await client.get("/view", params=params, headers={"Range": f"bytes={size}-"})
    assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{size}"
    return data


# ---- video jobs on both modes -------------------------------------------------------------


async def test_sdcpp_video_job_end_to_end(harness: RouterHarness, tmp_path: Path) -> None:
    record = tmp_path / "sd.jsonl"
    client, _ = await start(harness, "llama_sdcpp", record)
    r = await client.post("/upload/image", **form("cat.png", PNG, overwrite="true"))
    assert r.json() == {"name": "cat.png", "subfolder": "", "type": "input"}
    prompt_id, entry = await run_video(client, video_workflow())
    gif = entry["outputs"]["41"]["gifs"][0]
    assert gif["filename"].endswith(".mp4") and gif["format"] == "video/h264-mp4"
    [sent] = records(record, "/sdcpp/v1/vid_gen")
    assert sent["body"]["init_image"] == "sha256:" + hashlib.sha256(PNG).hexdigest()
    assert sent["body"]["video_frames"] == 9 and sent["body"]["output_format"] == "avi"
    await check_view(client, gif, tmp_path)
    # Everything the router did not mint stays unanswered on sd-server (no ComfyUI there).
    assert (await client.get("/history/" + KOBOLD_PROMPT_ID)).json() == {}
    assert prompt_id in (await client.get("/history")).json()
    r = await client.get("/view", params={"filename": "kliteimg_00001_.png"})
    assert r.status_code == 404


async def test_kobold_video_job_with_audio_and_teed_uploads(
    harness: RouterHarness, tmp_path: Path
) -> None:
    record = tmp_path / "kobold.jsonl"
    client, _ = await start(harness, "kobold", record)
    upload = form("cat.png", PNG)
    r = await client.post("/upload/image", **upload)
    assert r.json() == {"name": "kcpp_img2img.jpg", "subfolder": "", "type": "input"}
    [teed] = records(record, "/upload/image", "sha256")
    assert teed["sha256"] == hashlib.sha256(upload["content"]).hexdigest()  # unchanged bytes
    store = harness.app[COMFY].uploads  # type: ignore[index]
    assert store.load("cat.png") == (PNG, "image") == store.load("kcpp_img2img.jpg")
    r = await client.post("/upload/image", **form("voice.wav", WAV, "application/octet-stream"))
    assert r.status_code == 200 and store.load("voice.wav") == (WAV, "audio")
    _, entry = await run_video(client, video_workflow(audio="voice.wav"))
    [sent] = records(record, "/sdapi/v1/txt2img")
    assert sent["audio"] is True
    body = sent["body"]
    assert (body["frames"], body["fps"], body["video_output_type"]) == (9, 8, 1)
    assert body["video_start_frame"] == "sha256:" + hashlib.sha256(PNG).hexdigest()
    await check_view(client, entry["outputs"]["41"]["gifs"][0], tmp_path)


async def test_kobold_still_image_workflow_is_forwarded(
    harness: RouterHarness, tmp_path: Path
) -> None:
    client, _ = await start(harness, "kobold", tmp_path / "k.jsonl")
    r = await client.post("/prompt", json={"prompt": still_workflow()})
    assert r.json()["prompt_id"] == KOBOLD_PROMPT_ID
    r = await client.get(f"/history/{KOBOLD_PROMPT_ID}")
    assert r.json()[KOBOLD_PROMPT_ID]["outputs"]["9"]["images"][0]["filename"].endswith(".png")
    r = await client.get("/view", params={"filename": "kliteimg_00001_.png", "type": "output"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert KOBOLD_PROMPT_ID in (await client.get("/history")).json()
    assert records(tmp_path / "k.jsonl", "/sdapi/v1/txt2img") == []  # no clip was rendered


async def test_failed_job_shows_error_in_history(harness: RouterHarness, tmp_path: Path) -> None:
    client, _ = await start(harness, "kobold", tmp_path / "k.jsonl")
    await client.post("/upload/image", **form("cat.png", PNG))
    wf = video_workflow()
    wf["77"]["inputs"]["length"] = 1  # one frame: the fake KoboldCpp answers with a PNG
    r = await client.post("/prompt", json={"prompt": wf})
    entry = await wait_done(client, r.json()["prompt_id"])
    assert entry["status"]["status_str"] == "error" and entry["outputs"] == {}
    message = entry["status"]["messages"][0][1]["exception_message"]
    assert "video container" in message


async def test_shutdown_cancels_running_job(harness: RouterHarness, tmp_path: Path) -> None:
    harness.faults["kobold"] = "--ttft 60"  # the backend would take a minute
    harness.model("vid", mode="kobold", sdmodel="ltx.safetensors")
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "vid-ltx"})).status_code == 200
    await client.post("/upload/image", **form("cat.png", PNG))
    r = await client.post("/prompt", json={"prompt": video_workflow()})
    jobs = harness.app[COMFY].jobs  # type: ignore[index]
    [runtime] = harness.runtimes.runtimes()
    for _ in range(100):
        if runtime.leases:
            break
        await asyncio.sleep(0.05)
    assert runtime.leases == 1  # the job holds the image runtime while the backend works
    started = time.monotonic()
    await harness.close()
    assert time.monotonic() - started < 20
    job = jobs.get(r.json()["prompt_id"])
    assert job is not None and job.state.value == "error" and "stopped" in (job.error or "")


# ---- refusals at submission -----------------------------------------------------------------


async def test_video_refused_without_ffmpeg_at_once(
    harness: RouterHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.model("vid", mode="llama_sdcpp", sdmodel="ltx.safetensors")
    empty = tmp_path / "no-ffmpeg"
    empty.mkdir()
    client = await harness.start()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(media_ffmpeg, "_bundled", lambda: None)  # the imageio-ffmpeg wheel
    media_ffmpeg.forget()
    try:
        started = time.monotonic()
        r = await client.post("/prompt", json={"prompt": video_workflow()})
        assert time.monotonic() - started < 10
    finally:
        media_ffmpeg.forget()
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "ffmpeg_unavailable"
    assert harness.app[COMFY].jobs.jobs() == []  # type: ignore[index]


async def test_video_refusals(harness: RouterHarness, tmp_path: Path) -> None:
    harness.model("vid", mode="llama_sdcpp", sdmodel="ltx.safetensors")
    client = await harness.start()
    r = await client.post("/prompt", json={"prompt": video_workflow()})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "no_active_image_model")
    assert (await client.post("/router/v1/load", json={"model": "vid-ltx"})).status_code == 200
    r = await client.post("/prompt", json={"prompt": video_workflow("never.png")})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "unknown_media")
    await client.post("/upload/image", **form("voice.wav", WAV, "audio/wav"))
    r = await client.post("/prompt", json={"prompt": video_workflow("voice.wav")})
    assert r.status_code == 400 and "audio" in r.json()["error"]["message"]
    r = await client.post("/prompt", json={"prompt": video_workflow(), "prompt_id": "x"})
    assert r.json()["error"]["code"] == "invalid_prompt_id"
    r = await client.post("/prompt", json={"prompt": still_workflow()})
    assert r.status_code == 400  # sd-server has no ComfyUI routes to forward a still image to
    assert harness.app[COMFY].jobs.jobs() == []  # type: ignore[index]


async def test_s6_upload_and_workflow_caps(harness: RouterHarness) -> None:
    harness.model("vid", mode="llama_sdcpp", sdmodel="ltx.safetensors")
    settings = harness.settings()
    client = await harness.start(
        settings.model_copy(
            update={"limits": settings.limits.model_copy(update={"workflow_media_mb": 1})}
        )
    )
    r = await client.post("/upload/image", **form("big.png", b"\0" * (33 * 1024 * 1024)))
    assert r.status_code == 413
    for name in ("a.png", "b.png"):
        r = await client.post("/upload/image", **form(name, PNG + b"\0" * 600_000))
        assert r.status_code == 200
    assert (await client.post("/router/v1/load", json={"model": "vid-ltx"})).status_code == 200
    wf = video_workflow("a.png")
    wf["79"] = n("LoadImage", image="b.png")
    wf["77"]["inputs"]["end_image"] = ["79", 0]
    r = await client.post("/prompt", json={"prompt": wf})
    assert (r.status_code, r.json()["error"]["code"]) == (413, "workflow_media_too_large")


# ---- S10, S11, S12 -----------------------------------------------------------------------


async def test_s10_view_never_leaves_minted_files(harness: RouterHarness, tmp_path: Path) -> None:
    client, _ = await start(harness, "llama_sdcpp", tmp_path / "r.jsonl")
    await client.post("/upload/image", **form("cat.png", PNG))
    _, entry = await run_video(client, video_workflow())
    minted = entry["outputs"]["41"]["gifs"][0]["filename"]
    secret = b"TOP-SECRET-CONTENTS"
    (tmp_path / "secret.txt").write_bytes(secret)
    # Also where "../secret.txt" from the outputs folder would land (one and two levels up).
    outputs = harness.app[COMFY].jobs.outputs  # type: ignore[index]
    for folder in (outputs.parent, outputs.parent.parent):
        (folder / "secret.txt").write_bytes(secret)
    for name in ("../secret.txt", "%2e%2e/secret.txt", "..%5csecret.txt", str(tmp_path)):
        r = await client.get(f"/view?filename={name}&type=output")
        assert r.status_code in (400, 404) and secret not in r.content, name
    for query in ("filename=a%00.mp4", f"filename={minted}&subfolder=..", "filename=%c0%ae%c0%ae"):
        r = await client.get(f"/view?{query}")
        assert r.status_code in (400, 404) and secret not in r.content, query
    os.symlink(tmp_path / "secret.txt", outputs / "planted.mp4")
    r = await client.get("/view", params={"filename": "planted.mp4"})
    assert r.status_code == 404 and secret not in r.content
    (outputs / minted).unlink()
    os.symlink(tmp_path / "secret.txt", outputs / minted)
    r = await client.get("/view", params={"filename": minted})
    assert r.status_code == 404 and secret not in r.content


@pytest.mark.parametrize(
    "name", ["../x.png", "a/b.png", "C:x.png", "\x01.png", "-i.wav", 'x";id;".wav', ".."]
)
async def test_s11_upload_names_refused(harness: RouterHarness, name: str) -> None:
    harness.model("vid", mode="llama_sdcpp", sdmodel="ltx.safetensors")
    client = await harness.start()
    r = await client.post("/upload/image", **form(name, PNG))
    assert r.status_code == 400, r.text
    root = harness.app[COMFY].uploads.root  # type: ignore[index]
    assert [p for p in root.rglob("*") if p.is_file()] == []


def test_s11_ffmpeg_argv_has_only_absolute_paths(tmp_path: Path) -> None:
    argv = transcode_argv("/usr/bin/ffmpeg", tmp_path / "a.avi", tmp_path / "b.mp4", "avi", False)
    assert argv[argv.index("-i") + 1] == str(tmp_path / "a.avi") and argv[-1].startswith("/")
    assert argv[argv.index("-protocol_whitelist") + 1] == "file"
    with pytest.raises(ValueError):
        transcode_argv("ffmpeg", Path("a.avi"), tmp_path / "b.mp4", "avi", True)


async def test_s12_uploaded_bytes_never_served_as_html(harness: RouterHarness) -> None:
    harness.model("vid", mode="llama_sdcpp", sdmodel="ltx.safetensors")
    client = await harness.start()
    html = b"<html><script>alert(1)</script></html>"
    for name, ctype in (
        ("x.html", "text/html"),
        ("x.svg", "image/svg+xml"),
        ("x.mp4", "video/mp4"),
    ):
        assert (await client.post("/upload/image", **form(name, html, ctype))).status_code == 200
        for kind in ("input", "output", "temp"):
            r = await client.get("/view", params={"filename": name, "type": kind})
            assert "html" not in r.headers.get("content-type", "") and html not in r.content


# ---- pure pieces ----------------------------------------------------------------------------


def test_parse_range() -> None:
    assert parse_range("bytes=0-9", 100) == (0, 9)
    assert parse_range("bytes=90-", 100) == (90, 99)
    assert parse_range("bytes=-200", 100) == (0, 99)
    assert parse_range("BYTES=1-1", 100) == (1, 1)
    for ignored in (None, "", "bytes=", "bytes=-", "bytes=9-1", "bytes=0-1,2-3", "bytes=x-1"):
        assert parse_range(ignored, 100) is None
    for bad in ("bytes=100-", "bytes=-0"):
        with pytest.raises(Unsatisfiable):
            parse_range(bad, 100)


def test_container_magic() -> None:
    assert container_of(b"RIFF\0\0\0\0AVI LIST") == ("avi", "avi")
    assert container_of(b"\x1a\x45\xdf\xa3rest") == ("matroska", "webm")
    assert container_of(b"#EXTM3U\nhttp://x/") is None  # never handed to ffmpeg to probe
