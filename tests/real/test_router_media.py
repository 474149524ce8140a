"""The real whisper-server and sd-server through the router (voice and image lanes).

The demo whisper model is steered to say SCRIPTED_TEXT whatever the audio; the random SDXS
model draws noise, so images are checked for being valid PNGs of the requested size.
"""

from __future__ import annotations

import base64
import struct
import time
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from router.demo_models.whisper_ggml import SCRIPTED_TEXT
from tests.real.router_fixtures import backend_binary, write_config
from tests.support.harness import RouterHarness

# The shared fixtures, used by name.

pytestmark = [pytest.mark.real, pytest.mark.timeout(120)]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# whisper-server's own Content-Type for each response format it offers.
TRANSCRIPT_TYPES = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/html",
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
}


# ---------------------------------------------------------------- whisper-server


async def whisper_router(h: RouterHarness, demo: dict[str, Path]) -> None:
    h.programs["whispercpp"] = backend_binary("whisper-server", "WHISPER_SERVER_BIN")
    h.extra_args["whispercpp"] = ["-t", "1"]  # two cores shared with other jobs
    write_config(h, "whisper", whispermodel=demo["model"])
    await h.start()


@pytest.mark.parametrize("response_format", list(TRANSCRIPT_TYPES))
async def test_transcription_in_every_format(
    real_harness: RouterHarness, demo_whisper: dict[str, Path], response_format: str
) -> None:
    await whisper_router(real_harness, demo_whisper)
    assert real_harness.client is not None
    started = time.monotonic()
    response = await real_harness.client.post(
        "/v1/audio/transcriptions",
        files={"file": ("tone.wav", demo_whisper["wav"].read_bytes(), "audio/wav")},
        data={"model": "whisper", "response_format": response_format, "temperature": "0"},
        timeout=60,
    )
    print(f"{response_format}: {time.monotonic() - started:.2f} s (load included)")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(TRANSCRIPT_TYPES[response_format])
    assert SCRIPTED_TEXT.strip() in response.text
    if response_format == "json":
        assert set(response.json()) == {"text"}
    elif response_format == "verbose_json":
        body = response.json()
        assert body["task"] == "transcribe" and body["duration"] == pytest.approx(1.0)
        assert {"id", "text", "start", "end"} <= set(body["segments"][0])
    elif response_format == "srt":
        assert response.text.startswith("1\n") and " --> " in response.text
    elif response_format == "vtt":
        assert response.text.startswith("WEBVTT") and " --> " in response.text
    assert real_harness.runtimes.status_of("whisper") == "ready"


async def test_openai_client_transcription(
    real_harness: RouterHarness, demo_whisper: dict[str, Path]
) -> None:
    await whisper_router(real_harness, demo_whisper)
    assert real_harness.server is not None
    client = AsyncOpenAI(
        base_url=str(real_harness.server.make_url("/v1")), api_key="unused", max_retries=0
    )
    with demo_whisper["wav"].open("rb") as audio:
        reply = await client.audio.transcriptions.create(
            model="whisper", file=audio, response_format="json", timeout=60
        )
    assert SCRIPTED_TEXT.strip() in reply.text


# ---------------------------------------------------------------- sd-server


async def sd_router(h: RouterHarness, model: Path) -> str:
    """Serve the cached SDXS demo model as config `sdxs`; returns its image ID."""
    h.programs["sdcpp"] = backend_binary("sd-server", "SD_SERVER_BIN")
    # --steps sets the default for /v1/images/generations, which has no steps field.
    h.extra_args["sdcpp"] = ["--steps", "1", "--threads", "2"]
    write_config(h, "sdxs", sdmodel=model)
    await h.start()
    return f"sdxs-{model.stem}"


def assert_png(b64: object, size: int) -> None:
    assert isinstance(b64, str)
    png = base64.b64decode(b64, validate=True)
    assert png.startswith(PNG_SIGNATURE)
    assert png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (size, size)


TXT2IMG = {"prompt": "a red fox", "width": 64, "height": 64, "steps": 1, "seed": 3}


@pytest.mark.parametrize(
    "selector",
    ["model", "sd_model_checkpoint", "override_settings.sd_model_checkpoint"],
)
async def test_sdapi_txt2img(real_harness: RouterHarness, demo_sdxs: Path, selector: str) -> None:
    image_id = await sd_router(real_harness, demo_sdxs)
    assert real_harness.client is not None
    body: dict[str, object] = dict(TXT2IMG)
    if selector == "override_settings.sd_model_checkpoint":
        body["override_settings"] = {"sd_model_checkpoint": image_id}
    else:
        body[selector] = image_id
    started = time.monotonic()
    response = await real_harness.client.post("/sdapi/v1/txt2img", json=body, timeout=90)
    print(f"txt2img by {selector}: {time.monotonic() - started:.2f} s (load included)")
    assert response.status_code == 200, response.text
    images = response.json()["images"]
    assert isinstance(images, list) and len(images) == 1
    assert_png(images[0], 64)
    assert real_harness.runtimes.status_of("sdxs") == "ready"


async def test_openai_images_generations(real_harness: RouterHarness, demo_sdxs: Path) -> None:
    image_id = await sd_router(real_harness, demo_sdxs)
    assert real_harness.client is not None
    body = {
        "model": image_id,
        "prompt": "a red fox",
        "size": "64x64",
        "n": 1,
        "output_format": "png",
    }
    started = time.monotonic()
    response = await real_harness.client.post("/v1/images/generations", json=body, timeout=90)
    print(f"images/generations: {time.monotonic() - started:.2f} s (load included)")
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert isinstance(data, list) and len(data) == 1
    assert_png(data[0]["b64_json"], 64)
