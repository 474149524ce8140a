"""The generated whisper and SDXS models served by the real whisper-server and sd-server.

Binaries come from `make backends` (backends/recipes.py: ~/.cache/tensor-router/backends/bin, or
$TENSOR_ROUTER_BACKENDS_DIR/bin, or WHISPER_SERVER_BIN / SD_SERVER_BIN). A missing binary fails
the test with the build command: a green run must mean the real backends answered.
Spawn-to-ready and per-request times are printed (pytest -s) and kept as test properties.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import gguf
import httpx
import numpy as np
import pytest

from router.demo_models.sdxs import plan_tensors, write_sdxs_gguf
from router.demo_models.whisper_ggml import (
    GGML_FILE_MAGIC,
    SCRIPTED_TEXT,
    write_test_wav,
    write_whisper_ggml,
)
from tests.real.conftest import RunningServer, run_server
from tests.real.router_fixtures import backend_binary
from tests.support.harness import free_port

pytestmark = [pytest.mark.real, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SD_MODEL_ID = "sd-cpp-local"
Recorder = Callable[[str, object], None]


@pytest.fixture
def record(record_property: Callable[[str, object], None]) -> Recorder:
    def save(name: str, seconds: object) -> None:
        record_property(name, seconds)
        print(f"{name}: {seconds}")  # shown with pytest -s

    return save


# ---------------------------------------------------------------- whisper-server


@pytest.fixture(scope="module")
def whisper_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("whisper")
    started = time.monotonic()
    model = write_whisper_ggml(folder / "ggml-demo.bin", seed=7)
    print(f"whisper model written in {time.monotonic() - started:.2f} s")
    return {"model": model, "wav": write_test_wav(folder / "tone.wav", seconds=1.0)}


@pytest.fixture(scope="module")
def whisper_server(whisper_files: dict[str, Path]) -> Iterator[RunningServer]:
    binary = backend_binary("whisper-server", "WHISPER_SERVER_BIN")
    port = free_port()
    cmd = [str(binary), "-m", str(whisper_files["model"]), "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "-t", "1"]  # one thread: two shared cores
    log = whisper_files["model"].with_name(f"whisper-server-{port}.log")
    with run_server(cmd, port=port, log_path=log, ready_within=READY_TIMEOUT_S) as server:
        print(f"whisper-server ready in {server.ready_seconds * 1000:.0f} ms")
        yield server


def test_whisper_model_file_layout(whisper_files: dict[str, Path], tmp_path: Path) -> None:
    data = whisper_files["model"].read_bytes()
    magic, *hparams = struct.unpack_from("<I11i", data)
    assert magic == GGML_FILE_MAGIC
    n_vocab, n_audio_ctx, n_state, n_head, n_audio_layer = hparams[:5]
    assert (n_vocab, n_audio_ctx, n_state, n_head, n_audio_layer) == (51864, 1500, 64, 2, 2)
    assert struct.unpack_from("<2i", data, 48) == (80, 201)
    filters = np.frombuffer(data, dtype="<f4", count=80 * 201, offset=56).reshape(80, 201)
    assert (filters >= 0).all() and (filters.sum(axis=1) > 0).all()
    assert 7_000_000 < len(data) < 10_000_000
    again = write_whisper_ggml(tmp_path / "again.bin", seed=7).read_bytes()
    other = write_whisper_ggml(tmp_path / "other.bin", seed=8).read_bytes()
    assert again == data and other != data


def test_whisper_health(whisper_server: RunningServer, record: Recorder) -> None:
    record("whisper_ready_s", round(whisper_server.ready_seconds, 3))
    response = httpx.get(whisper_server.base_url + "/health", timeout=5)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def _transcribe(server: RunningServer, wav: Path, response_format: str) -> httpx.Response:
    with wav.open("rb") as audio:
        return httpx.post(
            server.base_url + "/inference",
            files={"file": ("tone.wav", audio, "audio/wav")},
            data={"response_format": response_format},
            timeout=60,
        )


def _check_verbose(body: dict[str, object]) -> None:
    assert body["task"] == "transcribe"
    assert body["duration"] == pytest.approx(1.0)
    segments = body["segments"]
    assert isinstance(segments, list) and segments
    assert {"id", "text", "start", "end", "tokens"} <= set(segments[0])


EXPECTED_CONTENT_TYPE = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/html",
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
}


@pytest.mark.parametrize("response_format", list(EXPECTED_CONTENT_TYPE))
def test_whisper_transcribes(
    whisper_server: RunningServer,
    whisper_files: dict[str, Path],
    record: Recorder,
    response_format: str,
) -> None:
    started = time.monotonic()
    response = _transcribe(whisper_server, whisper_files["wav"], response_format)
    record(f"whisper_{response_format}_s", round(time.monotonic() - started, 3))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(EXPECTED_CONTENT_TYPE[response_format])
    # The demo model is steered to say the same words whatever the audio (whisper_ggml.py).
    assert SCRIPTED_TEXT.strip() in response.text
    if response_format == "json":
        assert set(response.json()) == {"text"}
    elif response_format == "verbose_json":
        _check_verbose(response.json())
    elif response_format == "srt":
        assert response.text.startswith("1\n") and " --> " in response.text
    elif response_format == "vtt":
        assert response.text.startswith("WEBVTT") and " --> " in response.text


# ---------------------------------------------------------------- sd-server


@pytest.fixture(scope="module")
def sdxs_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    started = time.monotonic()
    model = write_sdxs_gguf(tmp_path_factory.mktemp("sdxs") / "sdxs-demo.gguf", seed=7)
    print(f"SDXS model written in {time.monotonic() - started:.2f} s")
    return model


@pytest.fixture(scope="module")
def sd_server(sdxs_model: Path) -> Iterator[RunningServer]:
    binary = backend_binary("sd-server", "SD_SERVER_BIN")
    port = free_port()
    cmd = [str(binary), "-m", str(sdxs_model), "--listen-ip", "127.0.0.1"]
    # --steps sets the default for /v1/images/generations, which has no steps field.
    cmd += ["--listen-port", str(port), "--steps", "1", "--threads", "2"]
    log = sdxs_model.with_name(f"sd-server-{port}.log")
    with run_server(
        cmd, port=port, log_path=log, probe="/v1/models", ready_within=READY_TIMEOUT_S
    ) as server:
        print(f"sd-server ready in {server.ready_seconds * 1000:.0f} ms")
        yield server


def test_sdxs_gguf_layout(sdxs_model: Path) -> None:
    reader = gguf.GGUFReader(sdxs_model)
    plans = {plan.name: plan for plan in plan_tensors()}
    assert len(reader.tensors) == len(plans) == 610
    for tensor in reader.tensors:
        plan = plans[tensor.name]
        assert tensor.tensor_type == plan.qtype
        assert tuple(int(n) for n in tensor.shape) == plan.ne
    kinds = {plan.qtype for plan in plans.values()}
    assert kinds == {
        gguf.GGMLQuantizationType.F32,
        gguf.GGMLQuantizationType.F16,
        gguf.GGMLQuantizationType.Q4_0,
    }
    fc1 = next(t for t in reader.tensors if t.name.endswith("layers.0.mlp.fc1.weight"))
    weights = gguf.quants.dequantize(fc1.data, fc1.tensor_type)
    assert np.isfinite(weights).all() and 0.005 < float(weights.std()) < 0.05


def test_sd_models_route(sd_server: RunningServer, record: Recorder) -> None:
    record("sd_ready_s", round(sd_server.ready_seconds, 3))
    response = httpx.get(sd_server.base_url + "/v1/models", timeout=5)
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == [SD_MODEL_ID]


def _assert_png(b64: object, size: int) -> None:
    assert isinstance(b64, str)
    png = base64.b64decode(b64, validate=True)
    assert png.startswith(PNG_SIGNATURE)
    width, height = struct.unpack(">II", png[16:24])  # IHDR follows the signature
    assert (width, height) == (size, size)


def _post_json(server: RunningServer, route: str, body: dict[str, object]) -> dict[str, object]:
    response = httpx.post(server.base_url + route, json=body, timeout=90)
    assert response.status_code == 200, response.text
    payload = json.loads(response.content)
    assert isinstance(payload, dict)
    return payload


def test_sd_txt2img(sd_server: RunningServer, record: Recorder) -> None:
    body = {"prompt": "a red fox", "width": 64, "height": 64, "steps": 1, "seed": 3}
    started = time.monotonic()
    payload = _post_json(sd_server, "/sdapi/v1/txt2img", body)
    record("sd_txt2img_s", round(time.monotonic() - started, 3))
    images = payload["images"]
    assert isinstance(images, list) and len(images) == 1
    _assert_png(images[0], 64)


def test_sd_openai_images(sd_server: RunningServer, record: Recorder) -> None:
    body = {"prompt": "a red fox", "size": "64x64", "n": 1, "output_format": "png"}
    started = time.monotonic()
    payload = _post_json(sd_server, "/v1/images/generations", body)
    record("sd_openai_images_s", round(time.monotonic() - started, 3))
    data = payload["data"]
    assert isinstance(data, list) and len(data) == 1
    _assert_png(data[0]["b64_json"], 64)
