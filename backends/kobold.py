"""KoboldCpp: one process serves every lane of a configuration.

KoboldCpp reads the `.kcpps` itself (`--config`), and a file on disk may carry keys the
parser refused (`onready`, `port_param`, which overrides `--port` after parsing, `host`,
`remotetunnel`, ...). So the router never points KoboldCpp at the operator's file: it
writes a sanitized launch copy (the parser's normalized `raw`, minus every key in
`REFUSED_KEYS`, with component paths made absolute) into the runtime's workdir, and
launches with `--config <workdir>/launch.kcpps`. CLI flags win over same-named config keys.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import aiohttp

from backends.base import (
    LOOPBACK,
    Backend,
    ConfigNotSupported,
    IdentityMismatch,
    get_json,
)
from backends.routes import RouteTable
from router.config import ModelConfig, Settings
from router.domain import Family, Lane

LAUNCH_FILE = "launch.kcpps"
KOBOLD_DEFAULT_PORT = 5001  # koboldcpp.py `defaultport`

# Keys never passed to KoboldCpp: network exposure, credentials, shell hooks, admin and
# hot-reload (which would load other configs behind the router's back), non-server modes.
REFUSED_KEYS = frozenset(
    {
        "host", "port", "port_param", "onready", "allow_config_onready", "config",
        "password", "adminpassword", "admin", "admindir", "adminunloadtimeout",
        "routermode", "autoswapmode", "baseconfig", "remotetunnel", "ssl", "nocertify",
        "showgui", "launch", "benchmark", "prompt", "cli", "exportconfig",
        "exporttemplate", "mcpfile", "singleinstance", "testmemory", "analyze", "unpack",
        "version", "nomodel",
    }
)  # fmt: skip
ROUTER_KEYS = frozenset(
    {"backend_mode", "router_unload_policy", "router_jinja_kwargs_precedence", "serve_args",
     "run_embed_separate", "router_aliases", "router_kv_persist", "router_pin", "router_sleep"}
)  # fmt: skip
# Keys that load a model for some lane; used to split a run_embed_separate config.
MODEL_KEYS = frozenset(
    {
        "model", "model_param", "mmproj", "draftmodel", "lora", "sdmodel", "sdt5xxl",
        "sdclip1", "sdclip2", "sdvae", "sdlora", "sdupscaler", "sdphotomaker", "sdaudiovae",
        "whispermodel", "ttsmodel", "ttswavtokenizer", "embeddingsmodel", "musicllm",
        "musicembeddings", "musicdiffusion", "musicvae",
    }
)  # fmt: skip
# `/api/extra/version` capability that shows a lane was loaded.
_CAPABILITY = {
    Lane.TEXT: ("llm",),
    Lane.IMAGE: ("txt2img",),
    Lane.VOICE: ("transcribe", "tts"),
    Lane.EMBEDDINGS: ("embeddings",),
    Lane.MUSIC: ("music",),
}

# Shutdown, admin, save-data, multiplayer, websearch and MCP are left out on purpose: a
# client must not stop or reconfigure the backend, write files or reach the network with it.
ROUTES = RouteTable(
    [
        ("GET", "/api/v1/model"),
        ("GET", "/api/v1/config/max_length"),
        ("GET", "/api/v1/config/max_context_length"),
        ("GET", "/api/v1/info/version"),
        ("GET", "/api/extra/version"),
        ("GET", "/api/extra/true_max_context_length"),
        ("GET", "/api/extra/perf"),
        ("GET", "/api/extra/preloadstory"),
        ("GET POST", "/api/extra/generate/check"),
        ("GET POST", "/api/extra/last_logprobs"),
        ("POST", "/api/v1/generate"),
        ("POST", "/api/extra/generate/stream"),
        ("POST", "/api/extra/tokencount"),
        ("POST", "/api/extra/tokenize"),
        ("POST", "/api/extra/detokenize"),
        ("POST", "/api/extra/abort"),
        ("POST", "/api/extra/json_to_grammar"),
        ("POST", "/api/extra/transcribe"),
        ("POST", "/v1/audio/transcriptions"),
        ("POST", "/audio/transcriptions"),
        ("POST", "/api/extra/tts"),
        ("POST", "/v1/audio/speech"),
        ("POST", "/audio/speech"),
        ("POST", "/tts_to_audio"),
        ("GET", "/v1/audio/voices"),
        ("GET", "/audio/voices"),
        ("GET", "/speakers_list"),
        ("GET", "/api/extra/speakers_list"),
        ("GET", "/speakers"),
        ("POST", "/api/extra/embeddings"),
        ("POST", "/v1/embeddings"),
        ("POST", "/api/extra/music/*"),
        ("GET", "/musicui/*"),
        ("GET", "/props"),
        ("GET", "/slots"),
        ("GET", "/ping"),
        ("GET", "/v1/models"),
        ("GET", "/models"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/completion"),
        ("POST", "/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/chat/completions"),
        ("POST", "/v1/responses"),
        ("POST", "/responses"),
        ("POST", "/v1/messages"),
        ("POST", "/messages"),
        ("GET", "/api/tags"),
        ("GET", "/api/ps"),
        ("GET", "/api/version"),
        ("POST", "/api/show"),
        ("POST", "/api/generate"),
        ("POST", "/api/chat"),
        ("POST", "/sdapi/v1/txt2img"),
        ("POST", "/sdapi/v1/img2img"),
        ("POST", "/sdapi/v1/interrogate"),
        ("POST", "/sdapi/v1/extra-single-image"),
        ("POST", "/sdapi/v1/upscale"),
        ("GET", "/sdapi/v1/sd-models"),
        ("GET", "/sdapi/v1/options"),
        ("GET", "/sdapi/v1/samplers"),
        ("GET", "/sdapi/v1/schedulers"),
        ("GET", "/sdapi/v1/loras"),
        ("GET", "/sdapi/v1/upscalers"),
        ("GET", "/sdapi/v1/latent-upscale-modes"),
        ("GET", "/sdapi/v1/progress"),
        ("GET", "/sdapi/v1/get_last.json"),
        ("GET", "/sdapi/v1/get_last.png"),
        ("POST", "/v1/images/generations"),
        ("POST", "/images/generations"),
        ("POST", "/v1/images/edits"),
        ("POST", "/prompt"),
        ("POST", "/api/prompt"),
        ("GET", "/history/*"),
        ("GET", "/api/history/*"),
        ("GET", "/view*"),
        ("GET", "/api/view"),
        ("POST", "/upload/image"),
        ("POST", "/api/upload/image"),
        ("GET", "/system_stats"),
        ("GET", "/object_info/*"),
        ("GET", "/api/models/checkpoints"),
        ("GET", "/models/checkpoints"),
        ("GET", "/api/models/loras"),
    ]
)


class KoboldBackend(Backend):
    family = Family.KOBOLD
    default_program = "koboldcpp"
    install_hint = (
        "download KoboldCpp from its GitHub releases and set kobold.binary_path "
        '(or kobold.command, e.g. ["python3", "/opt/koboldcpp/koboldcpp.py"])'
    )
    ready_path = "/api/extra/version"
    ready_line = re.compile(r"Please connect to custom endpoint at")
    managed_flags = frozenset(
        {
            "--config",
            "--host",
            "--port",
            "--password",
            "--adminpassword",
            "--admin",
            "--admindir",
            "--routermode",
            "--autoswapmode",
            "--baseconfig",
            "--onready",
            "--allow-config-onready",
            "--remotetunnel",
            "--ssl",
            "--nocertify",
            "--showgui",
            "--launch",
            "--benchmark",
            "--prompt",
            "--cli",
            "--exportconfig",
            "--exporttemplate",
            "--mcpfile",
            "--nomodel",
            "--model",
            "-m",
            "--sdmodel",
            "--whispermodel",
            "--ttsmodel",
            "--embeddingsmodel",
            "--musicllm",
            "--musicdiffusion",
        }
    )
    argparse_style = True
    known_short = frozenset({"-mg", "-md"})  # main GPU, draft model
    managed_env = frozenset({"KCPP_PASSWORD", "KCPP_ADMINPASSWORD"})
    routes = ROUTES

    def runtime_lanes(self, config: ModelConfig, lane: Lane) -> frozenset[Lane]:
        if not config.run_embed_separate:
            return frozenset(config.lanes)
        if lane is Lane.EMBEDDINGS:
            return frozenset({Lane.EMBEDDINGS})
        return frozenset(config.lanes - {Lane.EMBEDDINGS})

    def launch_args(
        self,
        config: ModelConfig,
        lane: Lane,
        port: int,
        settings: Settings,
        workdir: Path | None,
    ) -> list[str]:
        if workdir is None:
            raise ConfigNotSupported(
                "KoboldCpp is launched from a sanitized copy of its config: pass workdir"
            )
        return [
            "--config",
            str(workdir / LAUNCH_FILE),
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--skiplauncher",
            "--quiet",
        ]

    def local_model_id(self, config: ModelConfig, lane: Lane) -> str:
        # KoboldCpp names itself "koboldcpp/<model file name>" in every answer; the router
        # rewrites any such name to the ID the client asked for (router/forwarding/rewrite.py wildcard).
        return "koboldcpp/*"

    def launch_files(self, config: ModelConfig, lane: Lane, settings: Settings) -> dict[str, bytes]:
        return {LAUNCH_FILE: json.dumps(launch_config(config, lane), indent=2).encode()}

    async def verify(
        self, session: aiohttp.ClientSession, base_url: str, config: ModelConfig, lane: Lane
    ) -> None:
        status, caps = await get_json(session, base_url + "/api/extra/version")
        if status != 200 or not isinstance(caps, dict) or caps.get("result") != "KoboldCpp":
            raise IdentityMismatch("the process on this port is not KoboldCpp")
        for served in self.runtime_lanes(config, lane):
            if not any(caps.get(name) for name in _CAPABILITY[served]):
                raise IdentityMismatch(f"KoboldCpp on this port has no {served} model loaded")
        text_model = config.components.get("model_param")
        if text_model is None or Lane.TEXT not in self.runtime_lanes(config, lane):
            return
        status, named = await get_json(session, base_url + "/api/v1/model")
        expected = f"koboldcpp/{text_model.stem}"
        if not isinstance(named, dict) or named.get("result") != expected:
            raise IdentityMismatch(f"KoboldCpp on this port does not serve {text_model.name}")


def launch_config(config: ModelConfig, lane: Lane) -> dict[str, object]:
    """The JSON KoboldCpp loads: sanitized, absolute component paths, lane-split when the
    config runs its embeddings model in a separate process."""
    out = {k: v for k, v in config.raw.items() if k not in REFUSED_KEYS and k not in ROUTER_KEYS}
    for key, path in config.components.items():
        out[key] = str(path)
    if "model_param" in config.components:
        out.pop("model", None)  # the legacy list form; model_param is authoritative
    if config.run_embed_separate:
        if lane is Lane.EMBEDDINGS:
            out = {k: v for k, v in out.items() if k not in MODEL_KEYS or k == "embeddingsmodel"}
        else:
            out.pop("embeddingsmodel", None)
    out["skiplauncher"] = True
    out["quiet"] = True
    # Config keys beat CLI positionals in KoboldCpp, and a port_param other than its default
    # replaces --port: pin both so neither the file nor a stray positional can move us.
    out["port_param"] = KOBOLD_DEFAULT_PORT
    out.setdefault("model_param", None)
    return out
