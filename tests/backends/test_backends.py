"""Backend adapters: argv per family, managed-flag refusal (S20), readiness, identity, routes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from backends import kobold as kobold_mod
from backends import vllm as vllm_mod
from backends import whispercpp as whisper_mod
from backends.base import (
    BackendUnavailable,
    ConfigNotSupported,
    IdentityMismatch,
    UnsafeArguments,
    child_environ,
)
from backends.registry import adapter_for
from router.config import ModelConfig, ProgramSection, Settings
from router.config.schema import ModelsSection, VllmSection
from router.domain import BackendMode, Family, Lane
from tests.support.harness import free_port

ROOT = Path("/models")
CMD = ("prog",)
LLAMA = adapter_for(Family.LLAMACPP)
KOBOLD = adapter_for(Family.KOBOLD)
SD = adapter_for(Family.SDCPP)
WHISPER = adapter_for(Family.WHISPERCPP)
VLLM = adapter_for(Family.VLLM)


def make_config(
    name: str = "hermes-8k",
    mode: BackendMode = BackendMode.LLAMA_SDCPP,
    components: dict[str, str] | None = None,
    **raw: Any,
) -> ModelConfig:
    comps = {k: ROOT / v for k, v in (components or {"model_param": "hermes.gguf"}).items()}
    lanes = {
        "model_param": Lane.TEXT,
        "sdmodel": Lane.IMAGE,
        "sddiffusionmodel": Lane.IMAGE,
        "whispermodel": Lane.VOICE,
        "embeddingsmodel": Lane.EMBEDDINGS,
        "musicllm": Lane.MUSIC,
    }
    extra = {
        k: raw.pop(k) for k in ("jinja_kwargs", "serve_args", "run_embed_separate") if k in raw
    }
    return ModelConfig(
        id=name,
        path=ROOT / "kcpps" / f"{name}.kcpps",
        raw={**{k: str(v) for k, v in comps.items()}, **raw},
        backend_mode=mode,
        components=comps,
        lanes=frozenset(lanes[k] for k in comps if k in lanes),
        image_id=None,
        jinja_kwargs=extra.get("jinja_kwargs", {}),
        serve_args=tuple(extra.get("serve_args", ())),
        run_embed_separate=extra.get("run_embed_separate", False),
    )


def make_settings(section: str = "", **fields: Any) -> Settings:
    programs: dict[str, Any] = {
        name: ProgramSection(command=CMD) for name in ("kobold", "llama", "sdcpp", "whispercpp")
    }
    programs["vllm"] = VllmSection(command=CMD)
    if section:
        cls = VllmSection if section == "vllm" else ProgramSection
        programs[section] = cls(**{"command": CMD, **fields})
    return Settings(**programs)


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# -- llama-server ------------------------------------------------------------------------


def test_llamacpp_text_argv_maps_kcpps_fields() -> None:
    config = make_config(
        components={"model_param": "hermes.gguf", "mmproj": "proj.gguf", "draftmodel": "d.gguf"},
        contextsize=8192,
        gpulayers=33,
        threads=6,
        batchsize=256,
        parallel=2,
        noflashattention=True,
        quantkv=1,
        jinja=True,
        jinja_kwargs={"enable_thinking": False},
        draftgpulayers=10,
        tensor_split=[3, 1],
        onready="rm -rf /",
    )
    argv = LLAMA.argv(config, Lane.TEXT, 40001, make_settings())
    assert argv[:10] == [
        "prog",
        "-m",
        "/models/hermes.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "40001",
        "--alias",
        "hermes-8k",
        "-c",
    ]
    # Every one of the 2 slots gets the whole contextsize (docs/kcpps.md).
    assert flag_value(argv, "-c") == "16384"
    assert flag_value(argv, "-ngl") == "33"
    assert flag_value(argv, "--mmproj") == "/models/proj.gguf"
    assert flag_value(argv, "-t") == "6"
    assert flag_value(argv, "-b") == "256"
    assert flag_value(argv, "-np") == "2"
    assert flag_value(argv, "-fa") == "off"
    assert (flag_value(argv, "-ctk"), flag_value(argv, "-ctv")) == ("q8_0", "q8_0")
    assert flag_value(argv, "-md") == "/models/d.gguf"
    assert flag_value(argv, "-ngld") == "10"
    assert flag_value(argv, "-ts") == "3,1"
    assert json.loads(flag_value(argv, "--chat-template-kwargs")) == {"enable_thinking": False}
    assert "--jinja" in argv
    assert not {"--api-key", "onready", "rm -rf /", "--embedding"} & set(argv)


def test_llamacpp_auto_values_pass_nothing() -> None:
    config = make_config(gpulayers=-1, threads=-1, batchsize=-1, contextsize=0)
    argv = LLAMA.argv(config, Lane.TEXT, 5, make_settings())
    assert argv == [
        "prog",
        "-m",
        "/models/hermes.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "5",
        "--alias",
        "hermes-8k",
        "-np",  # always explicit: llama-server's automatic slots share one cache
        "1",
        "-lv",
        "4",
    ]


def test_llamacpp_cache_types_and_errors() -> None:
    argv = LLAMA.argv(
        make_config(quantkv="q4_0", cache_type_v="f16"), Lane.TEXT, 5, make_settings()
    )
    assert (flag_value(argv, "-ctk"), flag_value(argv, "-ctv")) == ("q4_0", "f16")
    with pytest.raises(ConfigNotSupported, match="quantkv"):
        LLAMA.argv(make_config(quantkv="q3_weird"), Lane.TEXT, 5, make_settings())


def test_llamacpp_embeddings_lane_is_a_second_server() -> None:
    config = make_config(
        components={"model_param": "hermes.gguf", "embeddingsmodel": "bge.gguf"},
        embeddingsmaxctx=512,
        gpulayers=33,
    )
    argv = LLAMA.argv(config, Lane.EMBEDDINGS, 7, make_settings())
    assert argv[:9] == [
        "prog",
        "-m",
        "/models/bge.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "7",
        "--alias",
        "hermes-8k",
    ]
    assert argv[9:12] == ["--embedding", "--pooling", "mean"]
    assert flag_value(argv, "-c") == "512"
    assert flag_value(argv, "-ngl") == "0"  # KoboldCpp keeps embeddings on CPU by default
    reranker = make_config(components={"embeddingsmodel": "rr.gguf"}, rerank=True)
    rr_argv = LLAMA.argv(reranker, Lane.EMBEDDINGS, 7, make_settings())
    assert "--rerank" in rr_argv and "--embedding" not in rr_argv


def test_llamacpp_embeddings_fall_back_to_text_model() -> None:
    argv = LLAMA.argv(make_config(gpulayers=20), Lane.EMBEDDINGS, 7, make_settings())
    assert flag_value(argv, "-m") == "/models/hermes.gguf"
    assert flag_value(argv, "-ngl") == "20"


def test_llamacpp_id_with_comma_is_not_an_alias() -> None:
    config = make_config(name="a,b")
    argv = LLAMA.argv(config, Lane.TEXT, 7, make_settings())
    assert "--alias" not in argv
    assert LLAMA.local_model_id(config, Lane.TEXT) == "/models/hermes.gguf"
    assert LLAMA.local_model_id(make_config(), Lane.TEXT) == "hermes-8k"


def test_wrong_lane_for_family_is_refused() -> None:
    with pytest.raises(ConfigNotSupported):
        LLAMA.argv(make_config(), Lane.IMAGE, 7, make_settings())
    with pytest.raises(ConfigNotSupported):
        VLLM.argv(make_config(), Lane.TEXT, 7, make_settings())  # llama_sdcpp config


# -- program lookup ----------------------------------------------------------------------


def test_program_prefers_command_then_binary_path(tmp_path: Path) -> None:
    exe = tmp_path / "sd-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert SD.program(make_settings("sdcpp", command=("a", "b"))) == ["a", "b"]
    only_binary = Settings(sdcpp=ProgramSection(binary_path=exe))
    assert SD.program(only_binary) == [str(exe)]
    exe.chmod(0o644)
    with pytest.raises(BackendUnavailable, match="binary_path"):
        SD.program(only_binary)


def test_program_falls_back_to_path_then_explains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    built = tmp_path / "built"
    monkeypatch.setenv("TENSOR_ROUTER_BACKENDS_DIR", str(built))
    with pytest.raises(BackendUnavailable, match="sd-server was not found.*sdcpp.binary_path"):
        SD.program(Settings())
    exe = tmp_path / "whisper-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert WHISPER.program(Settings()) == [str(exe)]
    # Not on PATH: the per-machine build folder (`<root>/bin`, backends/installs.py).
    (built / "bin").mkdir(parents=True)
    sd = built / "bin" / "sd-server"
    sd.write_text("#!/bin/sh\n")
    sd.chmod(0o755)
    assert SD.program(Settings()) == [str(sd)]


def test_vllm_program_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TENSOR_ROUTER_BACKENDS_DIR", str(tmp_path / "built"))
    monkeypatch.setattr(vllm_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BackendUnavailable, match="vllm.command"):
        VLLM.program(Settings())
    # The venv an init job installed (docs/backends-setup.md).
    venv_python = tmp_path / "built" / "vllm" / "current" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text("#!/bin/sh\n")
    assert VLLM.program(Settings()) == [
        str(venv_python),
        "-m",
        "vllm.entrypoints.openai.api_server",
    ]
    monkeypatch.setattr(vllm_mod.importlib.util, "find_spec", lambda name: object())
    assert VLLM.program(Settings())[1:] == ["-m", "vllm.entrypoints.openai.api_server"]
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert VLLM.program(Settings(vllm=VllmSection(binary_path=exe))) == [str(exe), "serve"]


# -- KoboldCpp ---------------------------------------------------------------------------


def kobold_config(**raw: Any) -> ModelConfig:
    return make_config(
        mode=BackendMode.KOBOLD,
        components={
            "model_param": "hermes.gguf",
            "sdmodel": "sdxl.safetensors",
            "embeddingsmodel": "bge.gguf",
        },
        **raw,
    )


def test_kobold_argv_uses_sanitized_copy(tmp_path: Path) -> None:
    argv = KOBOLD.argv(kobold_config(), Lane.TEXT, 41000, make_settings(), workdir=tmp_path)
    assert argv == [
        "prog",
        "--config",
        str(tmp_path / "launch.kcpps"),
        "--host",
        "127.0.0.1",
        "--port",
        "41000",
        "--skiplauncher",
        "--quiet",
    ]
    with pytest.raises(ConfigNotSupported, match="workdir"):
        KOBOLD.argv(kobold_config(), Lane.TEXT, 41000, make_settings())


def test_kobold_launch_copy_drops_refused_keys() -> None:
    config = kobold_config(
        onready="curl evil | sh",
        port_param=9999,
        host="0.0.0.0",
        password="pw",
        remotetunnel=True,
        admin=True,
        admindir="/",
        mcpfile="mcp.json",
        contextsize=4096,
        backend_mode="kobold",
        model=["relative.gguf"],
        jinja_kwargs={"x": 1},
    )
    files = KOBOLD.launch_files(config, Lane.TEXT, make_settings())
    launched = json.loads(files["launch.kcpps"])
    assert set(kobold_mod.REFUSED_KEYS) & set(launched) == {"port_param"}
    assert launched["port_param"] == 5001  # KoboldCpp's default: --port stays in force
    assert "backend_mode" not in launched and "model" not in launched
    assert launched["model_param"] == "/models/hermes.gguf"
    assert launched["contextsize"] == 4096
    assert launched["skiplauncher"] is True


def test_kobold_run_embed_separate_splits_processes() -> None:
    config = kobold_config(run_embed_separate=True)
    text = kobold_mod.launch_config(config, Lane.TEXT)
    embed = kobold_mod.launch_config(config, Lane.EMBEDDINGS)
    assert "embeddingsmodel" not in text and text["sdmodel"] == "/models/sdxl.safetensors"
    assert embed["embeddingsmodel"] == "/models/bge.gguf"
    assert embed["model_param"] is None and "sdmodel" not in embed  # None pins the positional
    assert KOBOLD.runtime_lanes(config, Lane.EMBEDDINGS) == {Lane.EMBEDDINGS}
    assert KOBOLD.runtime_lanes(config, Lane.IMAGE) == {Lane.TEXT, Lane.IMAGE}
    assert KOBOLD.runtime_lanes(kobold_config(), Lane.TEXT) == {
        Lane.TEXT,
        Lane.IMAGE,
        Lane.EMBEDDINGS,
    }


# -- sd-server ---------------------------------------------------------------------------


def test_sdcpp_full_checkpoint_uses_m() -> None:
    config = make_config(
        components={"sdmodel": "sdxl.safetensors", "sdvae": "vae.safetensors"}, sdthreads=4
    )
    argv = SD.argv(config, Lane.IMAGE, 42000, make_settings())
    assert argv == [
        "prog",
        "--listen-ip",
        "127.0.0.1",
        "--listen-port",
        "42000",
        "-m",
        "/models/sdxl.safetensors",
        "--vae",
        "/models/vae.safetensors",
        "--threads",
        "4",
    ]
    assert SD.local_model_id(config, Lane.IMAGE) == "sd-cpp-local"


@pytest.mark.parametrize(
    ("components", "expected"),
    [
        ({"sdmodel": "flux.gguf", "sdt5xxl": "t5.gguf", "sdclip1": "l.st"}, "--diffusion-model"),
        ({"sdmodel": "qwen.gguf", "sdllm": "qwen-vl.gguf"}, "--diffusion-model"),
        ({"sdmodel": "sd35.st", "sdt5xxl": "t5.gguf", "sdclip2": "g.st"}, "-m"),
        ({"sddiffusionmodel": "unet.gguf"}, "--diffusion-model"),
    ],
)
def test_sdcpp_model_flag_rule(components: dict[str, str], expected: str) -> None:
    argv = SD.argv(make_config(components=components), Lane.IMAGE, 1, make_settings())
    main = next(iter(components.values()))
    assert flag_value(argv, expected) == f"/models/{main}"
    assert ("-m" in argv) == (expected == "-m")


def test_sdcpp_maps_encoders_and_switches() -> None:
    config = make_config(
        components={"sdmodel": "f.gguf", "sdt5xxl": "t5.gguf", "sdclip1": "l.st", "sdvae": "ae.st"},
        sdflashattention=True,
        sdoffloadcpu=True,
        sdconvdirect="full",
        sdclipdevice="cpu",
        sdloramodeldir="loras",
    )
    argv = SD.argv(config, Lane.IMAGE, 1, make_settings())
    assert flag_value(argv, "--t5xxl") == "/models/t5.gguf"
    assert flag_value(argv, "--clip_l") == "/models/l.st"
    assert flag_value(argv, "--lora-model-dir") == "/models/kcpps/loras"  # relative to .kcpps
    for switch in (
        "--diffusion-fa",
        "--offload-to-cpu",
        "--vae-conv-direct",
        "--diffusion-conv-direct",
        "--clip-on-cpu",
    ):
        assert switch in argv


# -- whisper-server ----------------------------------------------------------------------


def test_whisper_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    config = make_config(components={"whispermodel": "base.en.bin"}, threads=3)
    argv = WHISPER.argv(config, Lane.VOICE, 43000, make_settings())
    assert argv == [
        "prog",
        "-m",
        "/models/base.en.bin",
        "--host",
        "127.0.0.1",
        "--port",
        "43000",
        "--inference-path",
        "/v1/audio/transcriptions",
        "-t",
        "3",
    ]
    assert "--convert" not in argv
    monkeypatch.setattr(whisper_mod.shutil, "which", lambda name: None)
    with pytest.raises(BackendUnavailable, match="ffmpeg"):
        WHISPER.argv(config, Lane.VOICE, 1, make_settings("whispercpp", extra_args=("--convert",)))
    monkeypatch.setattr(whisper_mod.shutil, "which", lambda name: "/usr/bin/ffmpeg")
    with_convert = make_settings("whispercpp", extra_args=("--convert",))
    assert WHISPER.argv(config, Lane.VOICE, 1, with_convert)[-1] == "--convert"


# -- vLLM --------------------------------------------------------------------------------


def vllm_config(**raw: Any) -> ModelConfig:
    return make_config(
        name="qwen", mode=BackendMode.VLLM, components={"model_param": "Qwen2-0.5B"}, **raw
    )


def test_vllm_argv_and_serve_args() -> None:
    config = vllm_config(
        contextsize=4096,
        serve_args=[
            "--dtype",
            "float32",
            "--enforce-eager",
            "--lora-modules",
            "a=/l/a",
            "b=/l/b",
            "--gpu-memory-utilization=0.8",
        ],
    )
    argv = VLLM.argv(config, Lane.TEXT, 44000, make_settings())
    assert argv == [
        "prog",
        "--model",
        "/models/Qwen2-0.5B",
        "--host",
        "127.0.0.1",
        "--port",
        "44000",
        "--served-model-name",
        "qwen",
        "--max-model-len",
        "4096",
        "--dtype",
        "float32",
        "--enforce-eager",
        "--lora-modules",
        "a=/l/a",
        "b=/l/b",
        "--gpu-memory-utilization=0.8",
    ]
    own_len = vllm_config(contextsize=4096, serve_args=["--max-model-len", "512"])
    assert VLLM.argv(own_len, Lane.TEXT, 1, make_settings()).count("--max-model-len") == 1


@pytest.mark.parametrize(
    ("serve_args", "flag"),
    [
        (["--trust-remote-code"], "--trust-remote-code"),
        (["--trust_remote_code"], "--trust-remote-code"),
        (["--host", "0.0.0.0"], "--host"),
        (["--port=1"], "--port"),
        (["--api-key", "k"], "--api-key"),
        (["--served-model-name", "x"], "--served-model-name"),
        (["--ssl-keyfile", "k.pem"], "--ssl-keyfile"),
        (["--data-parallel-address", "10.0.0.1"], "--data-parallel-address"),
        (["--middleware", "evil.Mw"], "--middleware"),
        (["--some-unknown-flag"], "--some-unknown-flag"),
        (["/etc/shadow"], "'/etc/shadow'"),
        (["--enforce-eager", "/other/model"], "'/other/model'"),
        (["--enforce-eager=true"], "--enforce-eager"),
        (["--dtype"], "--dtype"),
        (["--chat-template", "../../etc/passwd"], "--chat-template"),
    ],
)
def test_vllm_serve_args_refused(serve_args: list[str], flag: str) -> None:
    with pytest.raises(UnsafeArguments) as err:
        VLLM.argv(vllm_config(serve_args=serve_args), Lane.TEXT, 1, make_settings())
    assert err.value.flag == flag


def test_vllm_trust_remote_code_only_when_allowed() -> None:
    config = vllm_config(serve_args=["--trust-remote-code"])
    allowed = make_settings("vllm", allow_trust_remote_code=True)
    assert "--trust-remote-code" in VLLM.argv(config, Lane.TEXT, 1, allowed)
    with pytest.raises(UnsafeArguments):
        VLLM.argv(
            vllm_config(), Lane.TEXT, 1, make_settings("vllm", extra_args=("--trust-remote-code",))
        )


def test_vllm_chat_template_outside_file_roots() -> None:
    config = vllm_config(serve_args=["--chat-template", "/etc/template.jinja"])
    assert VLLM.argv(config, Lane.TEXT, 1, make_settings())  # no roots configured
    rooted = Settings(
        vllm=VllmSection(command=CMD), models=ModelsSection(file_roots=(Path("/models"),))
    )
    with pytest.raises(UnsafeArguments, match="file_roots"):
        VLLM.argv(config, Lane.TEXT, 1, rooted)
    inside = vllm_config(serve_args=["--chat-template", "/models/t.jinja"])
    assert VLLM.argv(inside, Lane.TEXT, 1, rooted)


def test_vllm_env_is_offline_by_default() -> None:
    env = VLLM.env(vllm_config(), Lane.TEXT, make_settings())
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    online = make_settings("vllm", env={"HF_HUB_OFFLINE": "0", "VLLM_CPU_KVCACHE_SPACE": "1"})
    env = VLLM.env(vllm_config(), Lane.TEXT, online)
    assert env["HF_HUB_OFFLINE"] == "0" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    with pytest.raises(UnsafeArguments, match="VLLM_API_KEY"):
        VLLM.env(vllm_config(), Lane.TEXT, make_settings("vllm", env={"VLLM_API_KEY": "k"}))
    assert LLAMA.env(make_config(), Lane.TEXT, make_settings()) == {}


def test_child_environ_scrubs_router_credentials() -> None:
    base = {"PATH": "/bin", "TENSOR_ROUTER_ADMIN_KEY": "secret", "VLLM_API_KEY": "k"}
    env = child_environ(VLLM, vllm_config(), Lane.TEXT, make_settings(), base)
    assert env["PATH"] == "/bin" and env["HF_HUB_OFFLINE"] == "1"
    assert "TENSOR_ROUTER_ADMIN_KEY" not in env and "VLLM_API_KEY" not in env
    kenv = child_environ(
        KOBOLD, kobold_config(), Lane.TEXT, make_settings(), {"KCPP_PASSWORD": "p"}
    )
    assert kenv == {}


# -- managed flags in settings extra_args (S20) ----------------------------------------------

SECTIONS = {
    Family.LLAMACPP: ("llama", make_config(), Lane.TEXT),
    Family.KOBOLD: ("kobold", kobold_config(), Lane.TEXT),
    Family.SDCPP: ("sdcpp", make_config(components={"sdmodel": "x.st"}), Lane.IMAGE),
    Family.WHISPERCPP: (
        "whispercpp",
        make_config(components={"whispermodel": "w.bin"}),
        Lane.VOICE,
    ),
    Family.VLLM: ("vllm", vllm_config(), Lane.TEXT),
}
REFUSED_EXTRA = [
    (Family.LLAMACPP, ["--host", "0.0.0.0"]),
    (Family.LLAMACPP, ["--port=9"]),
    (Family.LLAMACPP, ["-m", "/etc/shadow"]),
    (Family.LLAMACPP, ["-a", "other"]),
    (Family.LLAMACPP, ["--api-key", "k"]),
    (Family.LLAMACPP, ["-hf", "org/model"]),
    (Family.LLAMACPP, ["--tools", "all"]),
    (Family.KOBOLD, ["--host", "0.0.0.0"]),
    (Family.KOBOLD, ["--ho", "0.0.0.0"]),  # argparse prefix abbreviation
    (Family.KOBOLD, ["--onready", "sh"]),
    (Family.KOBOLD, ["--allow-config-onready"]),
    (Family.KOBOLD, ["--allow_config_onready"]),
    (Family.KOBOLD, ["-m/etc/shadow"]),  # argparse short option with attached value
    (Family.KOBOLD, ["--remotetunnel"]),
    (Family.KOBOLD, ["--password", "x"]),
    (Family.SDCPP, ["-l", "0.0.0.0"]),
    (Family.SDCPP, ["--listen-port", "1"]),
    (Family.SDCPP, ["--diffusion-model", "x"]),
    (Family.WHISPERCPP, ["--host=0.0.0.0"]),
    (Family.WHISPERCPP, ["--inference-path", "/x"]),
    (Family.WHISPERCPP, ["--public", "/"]),
    (Family.VLLM, ["--served_model_name", "x"]),
    (Family.VLLM, ["--uds", "/tmp/s"]),
    (Family.VLLM, ["--grpc-port", "5"]),
    (Family.VLLM, ["--mod", "/etc"]),
]


@pytest.mark.parametrize(("family", "extra"), REFUSED_EXTRA)
def test_extra_args_may_not_override_managed_flags(family: Family, extra: list[str]) -> None:
    section, config, lane = SECTIONS[family]
    with pytest.raises(UnsafeArguments) as err:
        adapter_for(family).argv(
            config, lane, 1, make_settings(section, extra_args=tuple(extra)), workdir=Path("/w")
        )
    assert err.value.source == f"{section}.extra_args"
    assert err.value.flag in str(err.value)


@pytest.mark.parametrize(
    ("family", "extra"),
    [
        (Family.LLAMACPP, ["--threads-batch", "4", "--no-mmap", "-lv", "1"]),
        (Family.KOBOLD, ["-mg", "1", "-md", "d.gguf", "--usecuda", "0", "1", "--threads", "-1"]),
        (Family.SDCPP, ["--rng", "cpu", "-v"]),
        (Family.WHISPERCPP, ["-nf", "-l", "auto"]),  # -l is language for whisper-server
        (Family.VLLM, ["--max-num-seqs", "4", "--model-impl", "vllm"]),
    ],
)
def test_extra_args_are_appended_last(family: Family, extra: list[str]) -> None:
    section, config, lane = SECTIONS[family]
    settings = make_settings(section, extra_args=tuple(extra))
    argv = adapter_for(family).argv(config, lane, 1, settings, workdir=Path("/w"))
    assert argv[-len(extra) :] == extra


DANGEROUS = [
    "--onready",
    "sh -c x",
    "--host",
    "0.0.0.0",
    "--host=::",
    "--trust-remote-code",
    "--port",
    "-m",
    "/etc/shadow",
    "--api-key",
    "--listen-ip",
    "-l",
    "--allow-config-onready",
    "--threads",
    "4",
    "--served-model-name",
    "--hos",
    "--listen_ip",
]


@hsettings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    family=st.sampled_from(list(SECTIONS)),
    extra=st.lists(st.sampled_from(DANGEROUS), max_size=5),
    serve=st.lists(st.sampled_from(DANGEROUS), max_size=4),
)
# Found by a whole-suite run (1 seed in 3 at 20,000 examples): kept so every run tries it.
@example(family=Family.VLLM, extra=["-m", "/etc/shadow"], serve=[])
def test_s20_argv_never_carries_unsafe_tokens(
    family: Family, extra: list[str], serve: list[str]
) -> None:
    section, config, lane = SECTIONS[family]
    if family is Family.VLLM:
        config = vllm_config(serve_args=serve)
    settings = make_settings(section, extra_args=tuple(extra))
    try:
        argv = adapter_for(family).argv(config, lane, 1, settings, workdir=Path("/w"))
    except (UnsafeArguments, BackendUnavailable):
        return
    assert "--onready" not in argv and "--allow-config-onready" not in argv
    assert "--trust-remote-code" not in argv
    # A path may only appear as a value of a harmless flag, never as -m or a positional. To
    # argparse (KoboldCpp, vLLM) bare tokens after a flag are all its values (nargs="+").
    adapter = adapter_for(family)
    for index, token in enumerate(argv):
        if token == "/etc/shadow":
            flag = next((t for t in reversed(argv[:index]) if t.startswith("-")), None)
            assert flag is not None
            assert flag not in {"-m", "--model", "--diffusion-model", "--config"}
            if not adapter.argparse_style:
                assert argv[index - 1] == flag
    host_flags = {"--listen-ip", "-l"} if family is Family.SDCPP else {"--host"}
    for index, token in enumerate(argv[:-1]):
        if token in host_flags:
            assert argv[index + 1] == "127.0.0.1"
        assert not token.startswith("--host=")


# -- lanes and routes ------------------------------------------------------------------------


def test_lanes_served_follow_family_for() -> None:
    assert LLAMA.lanes_served(BackendMode.LLAMA_SDCPP) == {Lane.TEXT, Lane.EMBEDDINGS}
    assert SD.lanes_served(BackendMode.LLAMA_SDCPP) == {Lane.IMAGE}
    assert WHISPER.lanes_served(BackendMode.LLAMA_SDCPP) == {Lane.VOICE}
    assert KOBOLD.lanes_served(BackendMode.KOBOLD) == set(Lane)
    assert VLLM.lanes_served(BackendMode.VLLM) == {Lane.TEXT, Lane.VOICE, Lane.EMBEDDINGS}
    assert LLAMA.lanes_served(BackendMode.KOBOLD) == set()


@pytest.mark.parametrize(
    ("family", "method", "path", "served"),
    [
        (Family.LLAMACPP, "POST", "/v1/chat/completions", True),
        (Family.LLAMACPP, "GET", "/v1/chat/completions", False),
        (Family.LLAMACPP, "POST", "/v1/rerank", True),
        (Family.LLAMACPP, "POST", "/v1/audio/speech", False),
        (Family.LLAMACPP, "GET", "/metrics", False),  # not started with --metrics
        (Family.LLAMACPP, "POST", "/props", False),
        (Family.LLAMACPP, "POST", "/models/load", False),  # router-mode only
        (Family.LLAMACPP, "HEAD", "/health", True),
        (Family.LLAMACPP, "GET", "/v1/stream/abc-1", True),
        (Family.KOBOLD, "POST", "/api/v1/generate", True),
        (Family.KOBOLD, "GET", "/history/12345678-0000", True),
        (Family.KOBOLD, "POST", "/api/extra/music/generate", True),
        (Family.KOBOLD, "POST", "/api/extra/shutdown", False),
        (Family.KOBOLD, "POST", "/api/admin/reload_config", False),
        (Family.KOBOLD, "POST", "/api/embed", False),
        (Family.SDCPP, "POST", "/sdcpp/v1/vid_gen", True),
        (Family.SDCPP, "GET", "/sdcpp/v1/jobs/job_abc-1", True),
        (Family.SDCPP, "POST", "/sdcpp/v1/jobs/job_abc/cancel", True),
        (Family.SDCPP, "GET", "/sdcpp/v1/jobs/a/b", False),
        (Family.SDCPP, "POST", "/prompt", False),
        (Family.SDCPP, "GET", "/sdapi/v1/samplers/", True),
        (Family.WHISPERCPP, "POST", "/v1/audio/transcriptions", True),
        (Family.WHISPERCPP, "POST", "/inference", False),
        (Family.WHISPERCPP, "POST", "/load", False),
        (Family.WHISPERCPP, "POST", "/v1/audio/translations", False),
        (Family.VLLM, "GET", "/v1/responses/resp_1", True),
        (Family.VLLM, "DELETE", "/v1/responses/resp_1", True),
        (Family.VLLM, "POST", "/pooling", True),
        (Family.VLLM, "POST", "/sleep", False),
        (Family.VLLM, "POST", "/collective_rpc", False),
        (Family.VLLM, "POST", "/v1/chat/completions?x=1", True),
    ],
)
def test_serves_tables(family: Family, method: str, path: str, served: bool) -> None:
    assert adapter_for(family).serves(path, method) is served


def test_registry_has_every_family() -> None:
    for family in Family:
        assert adapter_for(family).family is family
    assert adapter_for(Family.LLAMACPP) is LLAMA


@pytest.mark.parametrize(
    ("family", "line", "ready"),
    [
        (Family.LLAMACPP, "0.00.016.053 I srv  llama_server: model loaded", True),
        (Family.LLAMACPP, "main: model loaded\n", True),
        (Family.LLAMACPP, "0.00.004.524 I srv    load_model: loading model '/m.gguf'", False),
        (Family.KOBOLD, "Please connect to custom endpoint at http://127.0.0.1:5001", True),
        (Family.KOBOLD, "Load Text Model OK: True", False),
        (Family.SDCPP, "[INFO ] main.cpp:300 - listening on: http://127.0.0.1:1234", True),
        (Family.WHISPERCPP, "whisper server listening at http://127.0.0.1:8080", True),
        (Family.VLLM, "INFO:     Uvicorn running on http://127.0.0.1:8000 (Press CTRL+C)", True),
        (Family.VLLM, "Starting vLLM API server 0 on http://127.0.0.1:8000", False),
    ],
)
def test_ready_lines(family: Family, line: str, ready: bool) -> None:
    pattern = adapter_for(family).ready_line
    assert pattern is not None
    assert bool(pattern.search(line)) is ready


# -- readiness and identity against a tiny server ----------------------------------------------

Handler = Callable[[web.Request], Any]
ServerFactory = Callable[[dict[str, Any]], Any]


@pytest.fixture
def serve_json(aiohttp_server: Any) -> ServerFactory:
    """Start a 127.0.0.1 server answering GET path -> (status, json) or a callable."""

    async def start(routes: dict[str, Any]) -> str:
        app = web.Application()
        for path, answer in routes.items():

            async def handle(request: web.Request, answer: Any = answer) -> web.Response:
                status, body = answer() if callable(answer) else answer
                return web.json_response(body, status=status)

            app.router.add_get(path, handle)
        server = await aiohttp_server(app)
        return f"http://127.0.0.1:{server.port}"

    return start


async def test_llamacpp_is_ready_after_503(serve_json: ServerFactory) -> None:
    answers = iter([(503, {"error": {"message": "Loading model"}})] * 2)
    base = await serve_json({"/health": lambda: next(answers, (200, {"status": "ok"}))})
    async with aiohttp.ClientSession() as session:
        assert await LLAMA.is_ready(session, base) is False
        assert await LLAMA.is_ready(session, base) is False
        assert await LLAMA.is_ready(session, base) is True


async def test_is_ready_false_when_refused() -> None:
    async with aiohttp.ClientSession() as session:
        for family in Family:
            assert (
                await adapter_for(family).is_ready(session, f"http://127.0.0.1:{free_port()}")
                is False
            )


async def test_llamacpp_verify_checks_model_path(serve_json: ServerFactory) -> None:
    config = make_config()
    good = await serve_json({"/props": (200, {"model_path": "/models/hermes.gguf"})})
    bad = await serve_json({"/props": (200, {"model_path": "/models/other.gguf"})})
    old = await serve_json(
        {
            "/props": (200, {}),
            "/v1/models": (200, {"data": [{"id": "x", "aliases": ["hermes-8k"]}]}),
        }
    )
    async with aiohttp.ClientSession() as session:
        await LLAMA.verify(session, good, config, Lane.TEXT)
        await LLAMA.verify(session, old, config, Lane.TEXT)
        with pytest.raises(IdentityMismatch, match="other.gguf") as err:
            await LLAMA.verify(session, bad, config, Lane.TEXT)
        assert "/models" not in str(err.value)  # no absolute paths in messages
        with pytest.raises(IdentityMismatch):
            await LLAMA.verify(session, f"http://127.0.0.1:{free_port()}", config, Lane.TEXT)


async def test_sdcpp_verify(serve_json: ServerFactory) -> None:
    config = make_config(components={"sdmodel": "sdxl.safetensors"})
    listing = (200, {"data": [{"id": "sd-cpp-local", "object": "model"}]})
    ok = await serve_json({"/v1/models": listing})
    other_model = await serve_json(
        {"/v1/models": listing, "/sdcpp/v1/capabilities": (200, {"model": {"stem": "flux"}})}
    )
    not_sd = await serve_json({"/v1/models": (200, {"data": [{"id": "llama"}]})})
    async with aiohttp.ClientSession() as session:
        await SD.verify(session, ok, config, Lane.IMAGE)
        with pytest.raises(IdentityMismatch, match="flux"):
            await SD.verify(session, other_model, config, Lane.IMAGE)
        with pytest.raises(IdentityMismatch):
            await SD.verify(session, not_sd, config, Lane.IMAGE)


async def test_vllm_verify(serve_json: ServerFactory) -> None:
    config = vllm_config()
    entry = {"id": "qwen", "root": "/models/Qwen2-0.5B"}
    ok = await serve_json({"/v1/models": (200, {"data": [entry]})})
    wrong_root = await serve_json({"/v1/models": (200, {"data": [{**entry, "root": "/m/x"}]})})
    other = await serve_json({"/v1/models": (200, {"data": [{"id": "llama3"}]})})
    async with aiohttp.ClientSession() as session:
        await VLLM.verify(session, ok, config, Lane.TEXT)
        for base in (wrong_root, other):
            with pytest.raises(IdentityMismatch):
                await VLLM.verify(session, base, config, Lane.TEXT)


async def test_kobold_verify(serve_json: ServerFactory) -> None:
    config = kobold_config()
    caps = {"result": "KoboldCpp", "llm": True, "txt2img": True, "embeddings": True}
    model = (200, {"result": "koboldcpp/hermes"})
    ok = await serve_json({"/api/extra/version": (200, caps), "/api/v1/model": model})
    no_image = await serve_json(
        {"/api/extra/version": (200, {**caps, "txt2img": False}), "/api/v1/model": model}
    )
    wrong_model = await serve_json(
        {"/api/extra/version": (200, caps), "/api/v1/model": (200, {"result": "koboldcpp/x"})}
    )
    async with aiohttp.ClientSession() as session:
        await KOBOLD.verify(session, ok, config, Lane.TEXT)
        with pytest.raises(IdentityMismatch, match="image"):
            await KOBOLD.verify(session, no_image, config, Lane.TEXT)
        with pytest.raises(IdentityMismatch, match="hermes"):
            await KOBOLD.verify(session, wrong_model, config, Lane.TEXT)


async def test_whisper_verify_is_a_documented_no_op(serve_json: ServerFactory) -> None:
    base = await serve_json({"/health": (200, {"status": "ok"})})
    config = make_config(components={"whispermodel": "w.bin"})
    async with aiohttp.ClientSession() as session:
        assert await WHISPER.is_ready(session, base)
        await WHISPER.verify(session, base, config, Lane.VOICE)  # must not raise


# -- the real llama-server (tier `real`) ----------------------------------------------------


def _real_llama(settings: Settings) -> list[str]:
    try:
        return LLAMA.program(settings)
    except BackendUnavailable as exc:
        pytest.fail(f"real tier needs llama-server: {exc}", pytrace=False)


async def _run_until_ready(argv: list[str], config: ModelConfig, lane: Lane, port: int) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                if await LLAMA.is_ready(session, base):
                    break
                assert proc.returncode is None, f"llama-server exited early: {argv}"
                await asyncio.sleep(0.05)
            await LLAMA.verify(session, base, config, lane)
            other = make_config(components={"model_param": "other.gguf"})
            with pytest.raises(IdentityMismatch):
                await LLAMA.verify(session, base, other, lane)
            async with session.get(base + "/v1/models") as resp:
                listing = await resp.json()
            assert [m["id"] for m in listing["data"]] == [config.id]  # --alias took effect
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), timeout=10)


@pytest.mark.real
async def test_real_llama_server_text_and_embeddings(tmp_path: Path) -> None:
    from router.demo_models import write_bert_gguf, write_llama_gguf

    chat = write_llama_gguf(tmp_path / "chat.gguf", seed=1, name="chat")
    embed = write_bert_gguf(tmp_path / "embed.gguf", seed=2, name="embed")
    settings = Settings(llama=ProgramSection(command=tuple(_real_llama(Settings()))))
    config = ModelConfig(
        id="chat",
        path=tmp_path / "chat.kcpps",
        raw={
            "contextsize": 256,
            "threads": 1,
            "batchsize": 64,
            "parallel": 1,
            "quantkv": 0,
            "flashattention": True,
            "jinja": True,
            "gpulayers": 0,
        },
        backend_mode=BackendMode.LLAMA_SDCPP,
        components={"model_param": chat, "embeddingsmodel": embed},
        lanes=frozenset({Lane.TEXT, Lane.EMBEDDINGS}),
        image_id=None,
        jinja_kwargs={"enable_thinking": False},
    )
    for lane in (Lane.TEXT, Lane.EMBEDDINGS):
        port = free_port()
        await _run_until_ready(LLAMA.argv(config, lane, port, settings), config, lane, port)


def test_route_table_answers_stay_the_same_when_remembered_and_the_memory_is_bounded() -> None:
    from backends.routes import RouteTable

    table = RouteTable([("POST", "/v1/chat/completions"), ("GET", "/v1/models/*")])
    for _ in range(2):  # the second pass answers from what the first remembered
        assert table.matches("/v1/chat/completions", "POST")
        assert table.matches("/v1/chat/completions/", "post")
        assert not table.matches("/v1/chat/completions", "GET")
        assert table.matches("/v1/models/x?y=1", "HEAD")
    for i in range(2000):  # client-chosen paths never grow it past its bound
        assert not table.matches(f"/junk/{i}", "POST")
    assert len(table._seen) <= 512
    assert table.matches("/v1/chat/completions", "POST")
