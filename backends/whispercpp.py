"""whisper.cpp `whisper-server`: speech-to-text (voice lane) under `llama_sdcpp`.

whisper-server serves one inference path (default `/inference`); the router launches it
with `--inference-path /v1/audio/transcriptions` so OpenAI transcription requests pass
through unchanged (the form fields `file`, `response_format`, `language`, `prompt`,
`temperature` already match). Translations and `/api/extra/transcribe` need the router to
rewrite the request (form field `translate=true`, or the JSON audio into a multipart form),
so `serves()` does not claim them. No `--convert`: the router converts non-WAV audio
itself, and whisper-server with `--convert` and no ffmpeg exits 0 at start.
No identity check: whisper-server exposes nothing that names its model.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from backends.base import (
    LOOPBACK,
    Backend,
    BackendUnavailable,
    ConfigNotSupported,
    config_path,
    option_name,
    positive_int,
)
from backends.routes import RouteTable
from router.config import ModelConfig, Settings
from router.domain import Family, Lane

INFERENCE_PATH = "/v1/audio/transcriptions"

# `/load` (swap to any file on the server) and the static `/` pages are left out on purpose.
ROUTES = RouteTable([("POST", INFERENCE_PATH), ("GET", "/health")])


class WhisperCppBackend(Backend):
    family = Family.WHISPERCPP
    default_program = "whisper-server"
    install_hint = (
        "build whisper-server from whisper.cpp (cmake -DWHISPER_BUILD_SERVER=ON, target "
        "whisper-server) and set whispercpp.binary_path"
    )
    ready_path = "/health"
    ready_line = re.compile(r"whisper server listening at http://")
    managed_flags = frozenset(
        {"--host", "--port", "-m", "--model", "--public", "--request-path", "--inference-path"}
    )
    routes = ROUTES

    def launch_args(
        self,
        config: ModelConfig,
        lane: Lane,
        port: int,
        settings: Settings,
        workdir: Path | None,
    ) -> list[str]:
        model = config.model_file(Lane.VOICE)
        if model is None:
            raise ConfigNotSupported(f"{config.id} has no whispermodel")
        args = ["-m", str(model), "--host", LOOPBACK, "--port", str(port)]
        args += ["--inference-path", INFERENCE_PATH]
        threads = positive_int(config, "threads")
        args += ["-t", str(threads)] if threads else []
        vad = config_path(config, "whispercpp_vad_model")
        args += ["--vad", "-vm", str(vad)] if vad else []
        return args

    def check_extra_args(self, extra: Sequence[str], settings: Settings) -> None:
        super().check_extra_args(extra, settings)
        wants_convert = any(option_name(t) == "--convert" for t in extra)
        if wants_convert and shutil.which("ffmpeg") is None:
            raise BackendUnavailable(
                "whispercpp.extra_args has --convert but ffmpeg is not on PATH; "
                "whisper-server would exit at start"
            )
