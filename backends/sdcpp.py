"""stable-diffusion.cpp `sd-server`: the image lane under backend mode `llama_sdcpp`.

Which flag carries the main model (the rule is documented in docs/backends.md):
- `sddiffusionmodel` always goes to `--diffusion-model` (a bare diffusion/UNet file).
- `sdmodel` goes to `-m` (a full checkpoint: SD1.x, SDXL, SD3.x), except when the config
  also names a T5-XXL or LLM text encoder without a CLIP-G: those families (Flux, Wan,
  Qwen-Image, Z-Image, Chroma) ship the diffusion weights alone, so `--diffusion-model`.
"""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from backends.base import (
    LOOPBACK,
    Backend,
    ConfigNotSupported,
    IdentityMismatch,
    config_path,
    flag_set,
    get_json,
    model_ids,
    positive_int,
)
from backends.routes import RouteTable
from router.config import ModelConfig, Settings
from router.domain import Family, Lane

# What sd-server answers for every model in /v1/models.
LOCAL_MODEL_ID = "sd-cpp-local"

# .kcpps component key -> sd-server flag (flag names from examples/common/common.cpp).
_FILE_FLAGS = (
    ("sdvae", "--vae"),
    ("sdclip1", "--clip_l"),
    ("sdclip2", "--clip_g"),
    ("sdt5xxl", "--t5xxl"),
    ("sdllm", "--llm"),
    ("sdllmvision", "--llm_vision"),
    ("sdclipvision", "--clip_vision"),
    ("sdhighnoisediffusionmodel", "--high-noise-diffusion-model"),
    ("sdcontrolnet", "--control-net"),
    ("sdupscaler", "--upscale-model"),
    ("sdphotomaker", "--photo-maker"),
    ("sdaudiovae", "--audio-vae"),
    ("sdloramodeldir", "--lora-model-dir"),
    ("sdtensortyperules", "--tensor-type-rules"),
)

ROUTES = RouteTable(
    [
        ("GET", "/v1/models"),
        ("POST", "/v1/images/generations"),
        ("POST", "/v1/images/edits"),
        ("POST", "/sdapi/v1/txt2img"),
        ("POST", "/sdapi/v1/img2img"),
        ("GET", "/sdapi/v1/loras"),
        ("GET", "/sdapi/v1/upscalers"),
        ("GET", "/sdapi/v1/latent-upscale-modes"),
        ("GET", "/sdapi/v1/samplers"),
        ("GET", "/sdapi/v1/schedulers"),
        ("GET", "/sdapi/v1/sd-models"),
        ("GET", "/sdapi/v1/options"),
        ("GET", "/sdcpp/v1/capabilities"),
        ("POST", "/sdcpp/v1/img_gen"),
        ("POST", "/sdcpp/v1/vid_gen"),
        ("GET", "/sdcpp/v1/jobs/{id}"),
        ("POST", "/sdcpp/v1/jobs/{id}/cancel"),
    ]
)


class SdCppBackend(Backend):
    family = Family.SDCPP
    default_program = "sd-server"
    install_hint = (
        "build sd-server from stable-diffusion.cpp (cmake target sd-server) and set "
        "sdcpp.binary_path"
    )
    # No /health in sd-server; /v1/models exists in every build (capabilities is newer).
    ready_path = "/v1/models"
    ready_line = re.compile(r"listening on: http://")
    managed_flags = frozenset(
        {
            "-l",
            "--listen-ip",
            "--listen-port",
            "-m",
            "--model",
            "--diffusion-model",
            "--serve-html-path",
        }
    )
    routes = ROUTES

    def local_model_id(self, config: ModelConfig, lane: Lane) -> str:
        return LOCAL_MODEL_ID

    def launch_args(
        self,
        config: ModelConfig,
        lane: Lane,
        port: int,
        settings: Settings,
        workdir: Path | None,
    ) -> list[str]:
        args = ["--listen-ip", LOOPBACK, "--listen-port", str(port)]
        args += model_args(config)
        for key, flag in _FILE_FLAGS:
            path = config_path(config, key)
            if path is not None:
                args += [flag, str(path)]
        threads = positive_int(config, "sdthreads") or positive_int(config, "threads")
        args += ["--threads", str(threads)] if threads else []
        args += _switches(config)
        return args

    async def verify(
        self, session: aiohttp.ClientSession, base_url: str, config: ModelConfig, lane: Lane
    ) -> None:
        status, listing = await get_json(session, base_url + "/v1/models")
        if status != 200 or LOCAL_MODEL_ID not in model_ids(listing):
            raise IdentityMismatch("the process on this port is not sd-server")
        # Newer builds name the loaded file; older ones 404 here, which proves nothing either way.
        status, caps = await get_json(session, base_url + "/sdcpp/v1/capabilities")
        model = caps.get("model") if status == 200 and isinstance(caps, dict) else None
        stem = model.get("stem") if isinstance(model, dict) else None
        if isinstance(stem, str) and stem and stem not in _model_stems(config):
            raise IdentityMismatch(f"sd-server on this port serves {stem}, not {config.id}")


def model_args(config: ModelConfig) -> list[str]:
    diffusion = config_path(config, "sddiffusionmodel")
    full = config_path(config, "sdmodel")
    if diffusion is None and full is None:
        raise ConfigNotSupported(f"{config.id} has no sdmodel or sddiffusionmodel")
    args: list[str] = []
    if full is not None and diffusion is None and _diffusion_only(config):
        diffusion, full = full, None
    if full is not None:
        args += ["-m", str(full)]
    if diffusion is not None:
        args += ["--diffusion-model", str(diffusion)]
    return args


def _diffusion_only(config: ModelConfig) -> bool:
    has_big_encoder = any(config_path(config, k) for k in ("sdt5xxl", "sdllm"))
    return has_big_encoder and config_path(config, "sdclip2") is None


def _model_stems(config: ModelConfig) -> set[str]:
    return {p.stem for k in ("sdmodel", "sddiffusionmodel") if (p := config_path(config, k))}


def _switches(config: ModelConfig) -> list[str]:
    args: list[str] = []
    if flag_set(config, "sdflashattention"):
        args.append("--diffusion-fa")
    if flag_set(config, "sdoffloadcpu"):
        args.append("--offload-to-cpu")
    if flag_set(config, "sdvaecpu"):
        args.append("--vae-on-cpu")
    if str(config.raw.get("sdclipdevice", "")).upper() == "CPU":
        args.append("--clip-on-cpu")
    conv = config.raw.get("sdconvdirect")
    if conv in ("vaeonly", "full"):
        args.append("--vae-conv-direct")
    if conv == "full":
        args.append("--diffusion-conv-direct")
    return args
