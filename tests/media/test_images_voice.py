"""Image, voice and music lanes through a real router with fake sd-server, whisper-server and
KoboldCpp backends (docs/media.md)."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from router.config import Settings
from router.media import ffmpeg
from tests.support.harness import RouterHarness, wav_bytes

pytestmark = pytest.mark.timeout(120)


def with_limits(settings: Settings, **limits: Any) -> Settings:
    return settings.model_copy(update={"limits": settings.limits.model_copy(update=limits)})


def record_whisper(harness: RouterHarness) -> Path:
    path = harness.tmp / "whisper-requests.jsonl"
    harness.faults["whispercpp"] = f"--record-requests {path}"
    return path


def whisper_calls(harness: RouterHarness, path: Path) -> list[dict[str, Any]]:
    return [r for r in harness.records(path) if r.get("event") == "inference"]


def image_models(harness: RouterHarness) -> None:
    harness.model("art", sdmodel="art.safetensors")  # image ID "art-art"
    harness.model("pix", sdmodel="pix.safetensors")  # image ID "pix-pix"


# ---- images --------------------------------------------------------------------------------


async def test_options_selects_and_loads_then_generation_uses_it(harness: RouterHarness) -> None:
    image_models(harness)
    client = await harness.start()
    r = await client.get("/sdapi/v1/options")
    assert r.status_code == 200 and r.json()["sd_model_checkpoint"] is None
    r = await client.post("/sdapi/v1/options", json={"sd_model_checkpoint": "pix-pix [88888888]"})
    assert r.status_code == 200, r.text
    assert r.json() is None
    assert harness.runtimes.status_of("pix") == "ready"
    options = (await client.get("/sdapi/v1/options")).json()
    assert options["sd_model_checkpoint"] == "pix-pix"
    assert options["samples_format"] == "png"
    r = await client.post("/sdapi/v1/txt2img", json={"prompt": "a cat"})
    assert r.status_code == 200, r.text
    assert r.headers["x-fake-model"].endswith("pix.safetensors")
    assert r.json()["images"]
    body = {"prompt": "a dog", "override_settings": {"sd_model_checkpoint": "art-art"}}
    r = await client.post("/sdapi/v1/txt2img", json=body)
    assert r.headers["x-fake-model"].endswith("art.safetensors")
    r = await client.post("/v1/images/generations", json={"prompt": "x", "model": "pix-pix"})
    assert r.status_code == 200 and r.headers["x-fake-model"].endswith("pix.safetensors")
    missing = await client.post("/sdapi/v1/options", json={"sd_model_checkpoint": "nope"})
    assert missing.status_code == 404


async def test_remembered_model_is_used_after_the_runtime_stops(harness: RouterHarness) -> None:
    image_models(harness)
    client = await harness.start()
    assert (
        await client.post("/sdapi/v1/options", json={"sd_model_checkpoint": "art-art"})
    ).status_code == 200
    r = await client.post("/router/v1/unload", json={"target": "image"})
    assert r.status_code == 200, r.text
    options = (await client.get("/sdapi/v1/options")).json()
    assert options["sd_model_checkpoint"] == "art-art"  # remembered while nothing runs
    r = await client.post("/sdapi/v1/txt2img", json={"prompt": "again"})
    assert r.status_code == 200 and r.headers["x-fake-model"].endswith("art.safetensors")


async def test_discovery_uses_the_active_runtime_and_never_loads(harness: RouterHarness) -> None:
    image_models(harness)
    client = await harness.start()
    assert (await client.get("/sdapi/v1/loras")).json() == []
    assert (await client.get("/sdapi/v1/progress")).json()["progress"] == 0.0
    r = await client.get("/sdcpp/v1/capabilities")
    assert r.status_code == 503
    assert "sd_model_checkpoint" in r.json()["error"]["message"]
    assert (await client.get("/sdapi/v1/get_last.json")).status_code == 503
    assert harness.runtimes.spawn_count == 0
    await client.post("/sdapi/v1/options", json={"sd_model_checkpoint": "pix-pix"})
    assert (await client.get("/sdapi/v1/loras")).json()[0]["name"] == "lora-of-pix"
    caps = await client.get("/sdcpp/v1/capabilities")
    assert caps.status_code == 200 and caps.json()["model"]["stem"] == "pix"
    assert harness.runtimes.spawn_count == 1


async def test_refresh_checkpoints_rescans_the_catalog(harness: RouterHarness) -> None:
    image_models(harness)
    client = await harness.start()
    harness.model("new", sdmodel="fresh.safetensors")
    r = await client.post("/sdapi/v1/refresh-checkpoints")
    assert r.status_code == 200
    titles = [m["title"] for m in (await client.get("/sdapi/v1/sd-models")).json()]
    assert "new-fresh" in titles


async def _poll_until_done(client: Any, job_id: str) -> dict[str, Any]:
    for _ in range(200):
        r = await client.get(f"/sdcpp/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        if r.json()["status"] in ("completed", "failed", "cancelled"):
            return {"headers": r.headers, **r.json()}
        await asyncio.sleep(0.02)
    raise AssertionError("the job never finished")


async def test_sdcpp_jobs_are_polled_on_the_runtime_that_took_them(
    harness: RouterHarness,
) -> None:
    image_models(harness)
    client = await harness.start()
    r = await client.post("/sdcpp/v1/img_gen", json={"prompt": "x", "model": "art-art"})
    assert r.status_code == 202, r.text
    assert int(r.headers["X-Tensors-Queue-Wait-Ms"]) > 0  # it waited for art's first load
    job_id = r.json()["id"]
    assert r.json()["poll_url"] == f"/sdcpp/v1/jobs/{job_id}"
    done = await _poll_until_done(client, job_id)
    assert done["status"] == "completed" and done["result"]["images"]
    assert done["headers"]["x-fake-model"].endswith("art.safetensors")
    # Another image model takes the lane: art's sd-server (and its jobs) are gone.
    r = await client.post("/sdapi/v1/txt2img", json={"prompt": "y", "model": "pix-pix"})
    assert r.status_code == 200
    gone = await client.get(f"/sdcpp/v1/jobs/{job_id}")
    assert gone.status_code == 404 and gone.json() == {"error": "job not found"}
    unknown = await client.post("/sdcpp/v1/jobs/job_nope/cancel")
    assert unknown.status_code == 404 and unknown.json() == {"error": "job not found"}


async def test_a_running_job_holds_its_runtime_against_a_swap(harness: RouterHarness) -> None:
    image_models(harness)
    client = await harness.start()
    r = await client.post("/sdcpp/v1/vid_gen", json={"prompt": "x", "model": "art-art"})
    job_id = r.json()["id"]
    held = [rt for rt in harness.runtimes.runtimes() if rt.config.id == "art"][0]
    assert held.leases == 1  # the job's lease, released once sd-server reports an end
    done = await _poll_until_done(client, job_id)
    assert done["result"]["mime_type"] == "video/webm"
    for _ in range(100):
        if held.leases == 0:
            break
        await asyncio.sleep(0.05)
    assert held.leases == 0


async def test_sdcpp_jobs_on_a_kobold_image_model_are_refused(harness: RouterHarness) -> None:
    harness.model("kart", mode="kobold", sdmodel="kart.safetensors")
    client = await harness.start()
    r = await client.post("/sdcpp/v1/img_gen", json={"prompt": "x", "model": "kart-kart"})
    assert r.status_code == 400 and "sd-server" in r.json()["error"]["message"]
    assert harness.runtimes.spawn_count == 0


# ---- voice: speech-to-text on whisper-server -------------------------------------------------

FORMATS = {
    "json": ("application/json", '"text"'),
    "verbose_json": ("application/json", '"segments"'),
    "text": ("text/html", "fake transcript"),
    "srt": ("application/x-subrip", "00:00:00,000 -->"),
    "vtt": ("text/vtt", "WEBVTT"),
}


async def test_transcription_output_formats_pass_through(harness: RouterHarness) -> None:
    harness.model("ears", whispermodel="ggml-base.bin")
    client = await harness.start()
    audio = wav_bytes()
    for fmt, (ctype, marker) in FORMATS.items():
        r = await client.post(
            "/v1/audio/transcriptions",
            files={"file": ("a.wav", audio, "audio/wav")},
            data={"model": "ears", "response_format": fmt},
        )
        assert r.status_code == 200, (fmt, r.text)
        assert r.headers["content-type"].startswith(ctype), fmt
        assert marker in r.text, fmt
        assert f"{len(audio)} bytes" in r.text, fmt  # WAV passes unconverted


async def test_selector_from_query_and_header(harness: RouterHarness) -> None:
    harness.model("ears", whispermodel="ggml-base.bin")
    harness.model("ears2", whispermodel="ggml-small.bin")
    client = await harness.start()
    files = {"file": ("a.wav", wav_bytes(), "audio/wav")}
    r = await client.post("/v1/audio/transcriptions?model=ears2", files=files)
    assert r.status_code == 200 and r.headers["x-fake-model"].endswith("ggml-small.bin")
    r = await client.post(
        "/v1/audio/transcriptions", files=files, headers={"X-Tensors-Model": "ears"}
    )
    assert r.status_code == 200 and r.headers["x-fake-model"].endswith("ggml-base.bin")


async def test_translations_are_forced_to_english(harness: RouterHarness) -> None:
    calls = record_whisper(harness)
    harness.model("ears", whispermodel="ggml-base.bin")
    client = await harness.start()
    r = await client.post(
        "/v1/audio/translations",
        files={"file": ("a.wav", wav_bytes(), "audio/wav")},
        data={"model": "ears", "translate": "false", "response_format": "verbose_json"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["task"] == "translate"
    fields = whisper_calls(harness, calls)[-1]["fields"]
    assert fields["translate"] == "true" and fields["language"] == "auto"
    r = await client.post(
        "/v1/audio/translations",
        files={"file": ("a.wav", wav_bytes(), "audio/wav")},
        data={"model": "ears", "language": "de"},
    )
    fields = whisper_calls(harness, calls)[-1]["fields"]
    assert fields["translate"] == "true" and fields["language"] == "de"  # the spoken language


async def test_kobold_transcribe_json_becomes_a_whisper_form(harness: RouterHarness) -> None:
    calls = record_whisper(harness)
    harness.model("ears", whispermodel="ggml-base.bin")
    client = await harness.start()
    audio = wav_bytes()
    for encoded in (
        base64.b64encode(audio).decode(),
        "data:audio/wav;base64," + base64.b64encode(audio).decode(),
    ):
        body = {
            "model": "ears",
            "audio_data": encoded,
            "prompt": "names: Ada",
            "langcode": "fr",
            "suppress_non_speech": True,
        }
        r = await client.post("/api/extra/transcribe", json=body)
        assert r.status_code == 200, r.text
        assert r.json() == {"text": f" fake transcript of {len(audio)} bytes"}
        call = whisper_calls(harness, calls)[-1]
        assert call["magic"] == "RIFF" and call["size"] == len(audio)
        assert call["fields"] == {
            "language": "fr",
            "prompt": "names: Ada",
            "suppress_non_speech": "true",
            "response_format": "json",
        }
    bad = await client.post("/api/extra/transcribe", json={"model": "ears", "audio_data": 5})
    assert bad.status_code == 400


def _encoded_sample(binary: str, tmp: Path) -> bytes:
    """Half a second of MP3, made by ffmpeg itself."""
    target = tmp / "tone.mp3"
    argv = [
        binary,
        "-hide_banner",
        "-loglevel",
        "error",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=440:duration=0.5",
        "-c:a",
        "libmp3lame",
        "-y",
        str(target),
    ]
    subprocess.run(argv, check=True, timeout=60)
    return target.read_bytes()


async def test_non_wav_is_converted_with_ffmpeg(harness: RouterHarness, tmp_path: Path) -> None:
    binary = await ffmpeg.locate("ffmpeg")
    if binary is None:
        pytest.fail("no ffmpeg and no imageio-ffmpeg: `make test` installs both")
    mp3 = _encoded_sample(binary, tmp_path)
    assert mp3[:3] == b"ID3" or mp3[:2] == b"\xff\xfb"
    calls = record_whisper(harness)
    harness.model("ears", whispermodel="ggml-base.bin")
    client = await harness.start()
    r = await client.post(
        "/v1/audio/transcriptions",
        files={"file": ("tone.mp3", mp3, "audio/mpeg")},
        data={"model": "ears", "response_format": "srt"},
    )
    assert r.status_code == 200, r.text
    call = whisper_calls(harness, calls)[-1]
    assert call["magic"] == "RIFF"
    assert call["size"] > 44 + 2 * 16000 * 0.4  # about half a second of 16 kHz mono PCM
    assert call["fields"]["response_format"] == "srt"


async def test_non_wav_without_ffmpeg_is_refused(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ffmpeg, "_candidates", lambda configured: [])
    ffmpeg.forget()
    harness.model("ears", whispermodel="ggml-base.bin")
    client = await harness.start()
    r = await client.post(
        "/v1/audio/transcriptions",
        files={"file": ("a.mp3", b"ID3\x04" + bytes(400), "audio/mpeg")},
        data={"model": "ears"},
    )
    ffmpeg.forget()
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "audio_not_wav"
    assert "ffmpeg" in r.json()["error"]["message"]


async def test_streaming_path_requires_wav(harness: RouterHarness) -> None:
    calls = record_whisper(harness)
    harness.model("ears", whispermodel="ggml-base.bin")
    client = await harness.start(with_limits(harness.settings(), selector_scan_mb=0.0625))
    big_mp3 = b"ID3\x04" + os.urandom(200_000)
    r = await client.post(
        "/v1/audio/transcriptions",
        files={"file": ("a.mp3", big_mp3, "audio/mpeg")},
        data={"model": "ears"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "audio_not_wav"
    assert "WAV" in r.json()["error"]["message"]
    big_wav = wav_bytes(seconds=8)  # 256 kB, beyond the 64 KiB scan limit
    r = await client.post(
        "/v1/audio/translations",
        files={"file": ("a.wav", big_wav, "audio/wav")},
        data={"model": "ears"},
    )
    assert r.status_code == 200, r.text
    call = whisper_calls(harness, calls)[-1]
    assert call["size"] == len(big_wav) and call["fields"]["translate"] == "true"


async def _multipart_stream(boundary: str, size: int) -> AsyncIterator[bytes]:
    yield (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nears\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    ).encode()
    yield wav_bytes(0)[:44]
    chunk = bytes(1 << 20)
    sent = 44
    while sent < size:
        piece = chunk[: min(len(chunk), size - sent)]
        sent += len(piece)
        yield piece
    yield f"\r\n--{boundary}--\r\n".encode()


async def test_r26_200mb_upload_streams_without_router_buffering(harness: RouterHarness) -> None:
    harness.model("ears", whispermodel="ggml-base.bin")
    client = await harness.start(with_limits(harness.settings(), selector_scan_mb=1))
    warm = await client.post(
        "/v1/audio/transcriptions",
        files={"file": ("a.wav", wav_bytes(), "audio/wav")},
        data={"model": "ears"},
    )
    assert warm.status_code == 200
    me = psutil.Process()
    baseline, peak = me.memory_info().rss, 0
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, me.memory_info().rss)
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    size = 200 * 1024 * 1024
    r = await client.post(
        "/v1/audio/transcriptions",
        content=_multipart_stream("r26boundary", size),
        headers={"Content-Type": "multipart/form-data; boundary=r26boundary"},
    )
    stop.set()
    await sampler
    assert r.status_code == 200, r.text
    assert f"{size} bytes" in r.text
    growth_mb = (peak - baseline) / (1024 * 1024)
    assert growth_mb < 48, f"router RSS grew {growth_mb:.0f} MB for a 200 MB upload"


# ---- voice: text-to-speech and KoboldCpp -----------------------------------------------------


async def test_tts_is_refused_under_llama_sdcpp(harness: RouterHarness) -> None:
    harness.model("ears", whispermodel="ggml-base.bin")
    harness.model("chat")
    client = await harness.start()
    for path, body in (
        ("/v1/audio/speech", {"model": "ears", "input": "hi"}),
        ("/api/extra/tts", {"input": "hi"}),
        ("/v1/audio/speech", {"model": "chat", "input": "hi"}),
    ):
        r = await client.post(path, json=body)
        assert r.status_code == 400, (path, r.text)
        assert "llama-server has no" in r.text and "kobold" in r.text
    assert (await client.get("/v1/audio/voices?model=ears")).status_code == 400
    assert harness.runtimes.spawn_count == 0


async def test_kobold_speech_voices_and_transcription(harness: RouterHarness) -> None:
    (harness.models_dir / "voice.gguf").write_bytes(b"GGUF")
    harness.model(
        "talk",
        mode="kobold",
        whispermodel="whisper.bin",
        ttsmodel=str(harness.models_dir / "voice.gguf"),
    )
    client = await harness.start()
    r = await client.post("/v1/audio/speech", json={"model": "talk", "input": "hello"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/wav" and r.content[:4] == b"RIFF"
    r = await client.post("/api/extra/tts", json={"input": "hello"})
    assert r.status_code == 200 and r.content[:4] == b"RIFF"
    assert (await client.get("/v1/audio/voices")).json() == {"voices": ["kobo", "cheery"]}
    r = await client.post(
        "/api/extra/transcribe",
        json={"model": "talk", "audio_data": base64.b64encode(wav_bytes()).decode()},
    )
    assert r.status_code == 200 and "fake transcript" in r.json()["text"]
    r = await client.post(
        "/v1/audio/translations",
        files={"file": ("a.wav", wav_bytes(), "audio/wav")},
        data={"model": "talk"},
    )
    assert r.status_code == 400 and "translation" in r.json()["error"]["message"]
    assert harness.runtimes.spawn_count == 1


async def test_kobold_without_ttsmodel_refuses_speech(harness: RouterHarness) -> None:
    harness.model("hear", mode="kobold", whispermodel="whisper.bin")
    client = await harness.start()
    r = await client.post("/v1/audio/speech", json={"model": "hear", "input": "hi"})
    assert r.status_code == 400 and "ttsmodel" in r.json()["error"]["message"]


# ---- music --------------------------------------------------------------------------------


async def test_music_goes_to_a_kobold_config_with_music(harness: RouterHarness) -> None:
    (harness.models_dir / "song.gguf").write_bytes(b"GGUF")
    harness.model("band", mode="kobold", musicllm=str(harness.models_dir / "song.gguf"))
    harness.model("chat")
    client = await harness.start()
    r = await client.post("/api/extra/music/generate?model=band", json={"prompt": "jazz"})
    assert r.status_code == 200, r.text
    assert r.json()["step"] == "generate"
    r = await client.get("/musicui")
    assert r.status_code == 200 and "music" in r.text
    r = await client.post("/api/extra/music/generate?model=chat", json={"prompt": "jazz"})
    assert r.status_code == 400 and "music" in r.json()["error"]["message"]
