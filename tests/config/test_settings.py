"""router/config/schema.py and load.py: schema, error reporting, env credentials, paths, durations
(durations.py), binds (addresses.py)."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from router.config import (
    Settings,
    SettingsError,
    load_settings,
    parse_duration,
    resolve_config_path,
)
from router.config.addresses import split_bind
from router.config.policy import placeholder_reason

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs" / "router.example.yaml"
REFERENCE = ROOT / "docs" / "configuration.md"

# Realistic keys (random-looking, distinct) for the cases that need valid credentials.
INF, ADM, CLU = "inf-7f3a9c2e81b4", "adm-5d1e0b9a7c63", "clu-2b8f4e6a1d09"


def field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of the schema (sections recursed, `source` is not a YAML key)."""
    out = []
    for name, info in model.model_fields.items():
        if name == "source":
            continue
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += field_paths(annotation, f"{prefix}{name}.")
        else:
            out.append(f"{prefix}{name}")
    return out


def write(tmp_path: Path, body: str, *, kcpps: bool = True) -> Path:
    if kcpps:
        (tmp_path / "kcpps").mkdir(exist_ok=True)
    path = tmp_path / "router.yaml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def fails(path: Path, env: dict[str, str] | None = None) -> SettingsError:
    with pytest.raises(SettingsError) as info:
        load_settings(path, {} if env is None else env)
    return info.value


# --- the example file -------------------------------------------------------------------


def test_example_validates_as_is() -> None:
    settings = load_settings(EXAMPLE, {})
    assert settings.security.profile == "secure"
    assert settings.server.bind == "127.0.0.1:8080"
    assert settings.models.config_dir == EXAMPLE.parent / "kcpps"
    assert settings.source == EXAMPLE


def test_example_shows_the_defaults() -> None:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    from_example = Settings.model_validate(data).model_dump()
    defaults = Settings().model_dump()
    # The one value the example spells out where the schema leaves None (documented default).
    assert from_example["analytics"].pop("database_path") == Path("data/router.sqlite")
    assert defaults["analytics"].pop("database_path") is None
    assert from_example == defaults


def test_example_names_and_comments_every_field() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    lines = text.splitlines()
    for dotted in field_paths(Settings):
        section, key = dotted.split(".")
        assert key in data.get(section, {}), f"{dotted} missing from the example"
        index = next(
            i
            for i, line in enumerate(lines)
            if line.startswith(f"  {key}:") and _section_of(lines, i) == section
        )
        assert lines[index - 1].strip().startswith("#"), f"{dotted} has no comment above it"


def _section_of(lines: list[str], index: int) -> str:
    for line in reversed(lines[:index]):
        if line and not line.startswith((" ", "#")):
            return line.rstrip(":")
    return ""


def test_reference_documents_every_field() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    missing = [dotted for dotted in field_paths(Settings) if f"`{dotted}`" not in text]
    assert not missing, f"docs/configuration.md lacks {missing}"
    for variable in ("INFERENCE_KEY", "ADMIN_KEY", "CLUSTER_TOKEN", "CONFIG"):
        assert f"TENSOR_ROUTER_{variable}" in text
    # Each field has a table row whose Default cell, read by the schema, is the default.
    rows, defaults = reference_rows(text), Settings()
    for dotted in field_paths(Settings):
        assert dotted in rows, f"docs/configuration.md has no table row for {dotted}"
        section, key = dotted.split(".")
        default = getattr(getattr(defaults, section), key)
        if dotted == "analytics.database_path":  # None: resolved at load, as the row says
            assert rows[dotted] == "`<config folder>/data/router.sqlite`"
            continue
        assert documented_default(dotted, rows[dotted], default) == default, dotted


_CELL = re.compile(r"(?<!\\)\|")  # a column border (`\|` inside a cell is text)
_CODE = re.compile(r"`([^`]*)`")


def reference_rows(text: str) -> dict[str, str]:
    """Every key named in a table's first column -> that row's Default cell (third column)."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in _CELL.split(line)[1:-1]]
        if len(cells) >= 3 and cells[0].startswith("`"):
            rows.update(dict.fromkeys(_CODE.findall(cells[0]), cells[2]))
    return rows


def documented_default(dotted: str, cell: str, default: Any) -> Any:
    """The Default cell's value as the schema reads it: its first `code` (YAML), or for a list
    written as items (`127.0.0.1/32`, `::1/128`) all of them."""
    spans = _CODE.findall(cell)
    assert spans, f"{dotted}: the Default cell {cell!r} shows no value"
    if isinstance(default, tuple) and not spans[0].startswith("["):
        raw: Any = [yaml.safe_load(span) for span in spans]
    else:
        raw = yaml.safe_load(spans[0])
    section, key = dotted.split(".")
    return getattr(getattr(Settings.model_validate({section: {key: raw}}), section), key)


# --- loading and paths ------------------------------------------------------------------


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, ""), {})
    assert settings.runtime.load_timeout == 600.0
    assert settings.analytics.database_path == tmp_path / "data" / "router.sqlite"
    assert settings.models.config_dir == tmp_path / "kcpps"


def test_empty_section_means_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "server:\nruntime:\n"), {})
    assert settings.server.max_connections == 1024


def test_relative_paths_resolve_against_the_yaml_folder(tmp_path: Path) -> None:
    (tmp_path / "conf" / "models").mkdir(parents=True)
    body = """\
        models: {config_dir: models, file_roots: [../weights, /abs/root]}
        analytics: {database_path: db/a.sqlite}
        media: {scratch_dir: scratch}
        llama: {binary_path: bin/llama-server, data_dir: ./data/llama}
        vllm: {data_dir: /srv/vllm}
    """
    path = tmp_path / "conf" / "router.yaml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    settings = load_settings(path, {})
    conf = tmp_path / "conf"
    assert settings.models.config_dir == conf / "models"
    assert settings.models.file_roots == (tmp_path / "weights", Path("/abs/root"))
    assert settings.analytics.database_path == conf / "db" / "a.sqlite"
    assert settings.media.scratch_dir == conf / "scratch"
    assert settings.llama.binary_path == conf / "bin" / "llama-server"
    assert settings.llama.data_dir == conf / "data" / "llama"
    assert settings.vllm.data_dir == Path("/srv/vllm")
    assert settings.source == path


def test_no_file_resolves_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kcpps").mkdir()
    monkeypatch.chdir(tmp_path)
    settings = load_settings(None, {})
    assert settings.source is None
    assert settings.models.config_dir == tmp_path / "kcpps"
    assert settings.analytics.database_path == tmp_path / "data" / "router.sqlite"


def test_resolve_config_path() -> None:
    env = {"TENSOR_ROUTER_CONFIG": "/etc/tr/router.yaml"}
    assert resolve_config_path("x.yaml", env) == Path("x.yaml")
    assert resolve_config_path(None, env) == Path("/etc/tr/router.yaml")
    assert resolve_config_path(None, {}) is None
    assert resolve_config_path(None, {"TENSOR_ROUTER_CONFIG": " "}) is None


def test_cidrs_and_hosts_are_normalized(tmp_path: Path) -> None:
    body = "server: {allowed_cidrs: [192.168.1.5/24, 10.1.2.3], allowed_hosts: [AI.Home.arpa]}\n"
    server = load_settings(write(tmp_path, body), {}).server
    assert server.allowed_cidrs == ("192.168.1.0/24", "10.1.2.3/32")
    assert server.allowed_hosts == ("ai.home.arpa",)
    assert len(server.networks()) == 2


@pytest.mark.parametrize(
    ("bind", "host", "port"),
    [
        ("127.0.0.1:8080", "127.0.0.1", 8080),
        ("[::1]:9000", "::1", 9000),
        ("gpu-box:80", "gpu-box", 80),
    ],
)
def test_split_bind(bind: str, host: str, port: int) -> None:
    assert split_bind(bind) == (host, port)


# --- every error names the key and the file ---------------------------------------------

ERROR_CASES: list[tuple[str, str, str]] = [
    # (yaml, expected key, a word the message must contain)
    ("bogus: 1\n", "bogus", "unknown key"),
    ("source: /x\n", "source", "unknown key"),
    ("server:\n  bindd: 1.2.3.4:80\n", "server.bindd", "bind"),
    ("llama:\n  extra: [a]\n", "llama.extra", "extra_args"),
    ("runtime:\n  load_timeout: 10 minutes\n", "runtime.load_timeout", "duration"),
    ("runtime:\n  stop_grace: -5\n", "runtime.stop_grace", "negative"),
    ("runtime:\n  load_timeout: 0\n", "runtime.load_timeout", "greater than 0"),
    ("server:\n  bind: '8080'\n", "server.bind", "HOST:PORT"),
    ("server:\n  bind: '::1:8080'\n", "server.bind", "brackets"),
    ("server:\n  bind: 'h:70000'\n", "server.bind", "port"),
    ("server:\n  allowed_cidrs: [192.168.1.0/33]\n", "server.allowed_cidrs[0]", "network"),
    ("server:\n  allowed_hosts: ['http://x']\n", "server.allowed_hosts[0]", "host name"),
    ("server: [1, 2]\n", "server", "mapping"),
    ("auth:\n  admin_keys: adm-5d1e0b9a7c63\n", "auth.admin_keys", "list"),
    ("security:\n  profile: open\n", "security.profile", "secure"),
    ("backend:\n  mode: ollama\n", "backend.mode", "llama_sdcpp"),
    ("cluster:\n  node_id: 'a b'\n", "cluster.node_id", "letters"),
    ("limits:\n  selector_scan_mb: 9000\n  max_stream_request_gb: 1\n", "limits", "selector"),
    ("kobold:\n  extra_args: [--port=5001]\n", "kobold.extra_args[0]", "--port"),
    (
        "sdcpp:\n  extra_args: [--threads, '4', --listen-ip, 0.0.0.0]\n",
        "sdcpp.extra_args[2]",
        "router",
    ),
    ("kobold:\n  extra_args: [--onready, 'rm -rf /']\n", "kobold.extra_args[0]", "router"),
]


@pytest.mark.parametrize(("body", "key", "word"), ERROR_CASES)
def test_errors_name_key_and_file(tmp_path: Path, body: str, key: str, word: str) -> None:
    path = write(tmp_path, body)
    err = fails(path)
    assert err.key == key
    assert err.file == str(path)
    assert word.lower() in err.message.lower()
    assert str(path) in str(err) and key in str(err)


def test_unknown_key_lists_the_valid_ones_and_the_line(tmp_path: Path) -> None:
    err = fails(write(tmp_path, "security:\n  profile: secure\nruntime:\n  load_timout: 5m\n"))
    assert err.key == "runtime.load_timout"
    assert err.line == 4
    assert "load_timeout" in err.message
    assert f"{err.file}:4:" in str(err)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    err = fails(write(tmp_path, "server:\n  bind: 127.0.0.1:8080\n  allowed_hosts: [a, b\n"))
    assert "syntax" in err.key and err.line is not None and err.line >= 3
    assert err.file.endswith("router.yaml")


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    err = fails(write(tmp_path, "runtime:\n  max_queue: 1\nserver: {}\nruntime:\n  max_queue: 2\n"))
    assert (err.key, err.line) == ("runtime", 4)


@pytest.mark.parametrize("body", ["- a\n- b\n", "just a string\n", "42\n"])
def test_top_level_must_be_a_mapping(tmp_path: Path, body: str) -> None:
    err = fails(write(tmp_path, body))
    assert err.key == "(top level)" and "mapping" in err.message


def test_missing_file(tmp_path: Path) -> None:
    err = fails(tmp_path / "nope.yaml")
    assert err.file == str(tmp_path / "nope.yaml") and "no such file" in err.message


def test_missing_config_dir(tmp_path: Path) -> None:
    path = write(tmp_path, "models: {config_dir: ./models}\n", kcpps=False)
    err = fails(path)
    assert (err.key, err.file, err.line) == ("models.config_dir", str(path), 1)
    assert "does not exist" in err.message


def test_config_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "models").write_text("x")
    err = fails(write(tmp_path, "models: {config_dir: models}\n", kcpps=False))
    assert err.key == "models.config_dir" and "not a folder" in err.message


# --- credentials ------------------------------------------------------------------------

PLACEHOLDERS = [
    "changeme",
    "CHANGEME",
    "change-me-please",
    "example",
    "password",
    "secret",
    "xxx",
    "xxxxxxxx",
    "",
    "   ",
    "your-key-here",
    "YOUR_API_KEY",
    "replace-me",
    "${ADMIN_KEY}",
    "<admin key>",
    "sk-example-1234",
    "00000000",
]


@pytest.mark.parametrize("value", PLACEHOLDERS)
def test_placeholder_credentials_are_refused(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f"auth:\n  inference_keys: [{INF}]\n  admin_keys: ['{value}']\n")
    err = fails(path)
    assert (err.key, err.file, err.line) == ("auth.admin_keys[0]", str(path), 3)
    assert value.strip() == "" or value not in str(err)  # the key itself is never echoed


@pytest.mark.parametrize("value", [INF, "Zq8-vR2_kLm9wX4pT7", "a1b2c3d4e5f6a7b8c9d0"])
def test_real_looking_keys_pass(value: str) -> None:
    assert placeholder_reason(value) is None


def test_placeholder_cluster_token(tmp_path: Path) -> None:
    err = fails(write(tmp_path, "cluster:\n  token: changeme\n"))
    assert err.key == "cluster.token"


@pytest.mark.parametrize(
    ("body", "key", "word"),
    [
        (f"auth:\n  inference_keys: [{INF}, {INF}]\n", "auth.inference_keys[1]", "duplicate"),
        (
            f"auth:\n  inference_keys: [{INF}]\n  admin_keys: [{INF}]\n",
            "auth.admin_keys[0]",
            "reused",
        ),
        (f"auth:\n  admin_keys: [{ADM}]\ncluster:\n  token: {ADM}\n", "cluster.token", "reused"),
    ],
)
def test_reused_credentials_are_refused(tmp_path: Path, body: str, key: str, word: str) -> None:
    err = fails(write(tmp_path, body))
    assert (err.key, err.file) == (key, str(tmp_path / "router.yaml"))
    assert word in err.message


def test_env_keys_are_added_to_the_yaml_lists(tmp_path: Path) -> None:
    path = write(tmp_path, f"auth:\n  inference_keys: [{INF}]\n")
    env = {
        "TENSOR_ROUTER_INFERENCE_KEY": "inf-from-env-91c2",
        "TENSOR_ROUTER_ADMIN_KEY": f" {ADM}\n",
        "TENSOR_ROUTER_CLUSTER_TOKEN": CLU,
    }
    settings = load_settings(path, env)
    assert settings.auth.inference_keys == (INF, "inf-from-env-91c2")
    assert settings.auth.admin_keys == (ADM,)
    assert settings.cluster.token == CLU == settings.auth.cluster_token


def test_env_file_credentials(tmp_path: Path) -> None:
    secret = tmp_path / "admin.key"
    secret.write_text(f"{ADM}\n")
    token = tmp_path / "cluster.token"
    token.write_text(f"  {CLU}  \n\n")
    env = {
        "TENSOR_ROUTER_ADMIN_KEY_FILE": str(secret),
        "TENSOR_ROUTER_CLUSTER_TOKEN_FILE": str(token),
    }
    settings = load_settings(write(tmp_path, "cluster: {token: clu-yaml-0a9b8c7d}\n"), env)
    assert settings.auth.admin_keys == (ADM,)
    assert settings.cluster.token == CLU  # the environment replaces the YAML token


def test_env_and_file_at_once_is_an_error(tmp_path: Path) -> None:
    secret = tmp_path / "k"
    secret.write_text(ADM)
    env = {"TENSOR_ROUTER_ADMIN_KEY": ADM, "TENSOR_ROUTER_ADMIN_KEY_FILE": str(secret)}
    err = fails(write(tmp_path, ""), env)
    assert err.key == "TENSOR_ROUTER_ADMIN_KEY" and "not both" in err.message


def test_unreadable_credential_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.key"
    err = fails(write(tmp_path, ""), {"TENSOR_ROUTER_INFERENCE_KEY_FILE": str(missing)})
    assert (err.key, err.file) == ("TENSOR_ROUTER_INFERENCE_KEY_FILE", str(missing))


def test_credential_file_with_two_keys(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"{INF}\n{ADM}\n")
    err = fails(write(tmp_path, ""), {"TENSOR_ROUTER_INFERENCE_KEY_FILE": str(keys)})
    assert err.file == str(keys) and "one key" in err.message


def test_placeholder_from_env_names_the_variable(tmp_path: Path) -> None:
    err = fails(write(tmp_path, ""), {"TENSOR_ROUTER_ADMIN_KEY": "changeme"})
    assert (err.key, err.file) == ("TENSOR_ROUTER_ADMIN_KEY", "(environment)")
    secret = tmp_path / "k"
    secret.write_text("\n")
    err = fails(write(tmp_path, ""), {"TENSOR_ROUTER_ADMIN_KEY_FILE": str(secret)})
    assert (err.key, err.file) == ("TENSOR_ROUTER_ADMIN_KEY_FILE", str(secret))


def test_env_key_reusing_a_yaml_key(tmp_path: Path) -> None:
    path = write(tmp_path, f"auth:\n  inference_keys: [{INF}]\n")
    err = fails(path, {"TENSOR_ROUTER_ADMIN_KEY": INF})
    assert err.key == "TENSOR_ROUTER_ADMIN_KEY" and "auth.inference_keys[0]" in err.message


def test_cluster_token_alias(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, f"auth:\n  cluster_token: {CLU}\n"), {})
    assert settings.cluster.token == CLU == settings.auth.cluster_token
    err = fails(write(tmp_path, f"auth:\n  cluster_token: {CLU}\ncluster:\n  token: {CLU}\n"))
    assert (err.key, err.line) == ("auth.cluster_token", 2)


def test_alias_kept_in_step_when_built_by_hand() -> None:
    settings = Settings.model_validate({"auth": {"cluster_token": CLU}})
    assert settings.cluster.token == CLU
    with pytest.raises(ValueError):
        Settings.model_validate({"auth": {"cluster_token": CLU}, "cluster": {"token": ADM}})


# --- security profile and bind ----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "ok"),
    [
        ("server: {bind: '127.0.0.1:8080'}\n", True),
        ("server: {bind: '[::1]:8080'}\n", True),
        ("server: {bind: 'localhost:8080'}\n", True),
        ("server: {bind: '0.0.0.0:8080'}\n", False),
        ("server: {bind: '192.168.1.20:8080'}\n", False),
        (f"server: {{bind: '0.0.0.0:8080'}}\nauth: {{inference_keys: [{INF}]}}\n", False),
        (f"server: {{bind: '0.0.0.0:8080'}}\nauth: {{admin_keys: [{ADM}]}}\n", False),
        (
            f"server: {{bind: '[::]:8080'}}\nauth: {{inference_keys: [{INF}], admin_keys: [{ADM}]}}\n",
            True,
        ),
        ("security: {profile: trusted_lan}\nserver: {bind: '0.0.0.0:8080'}\n", True),
    ],
)
def test_secure_profile_needs_keys_off_loopback(tmp_path: Path, body: str, ok: bool) -> None:
    path = write(tmp_path, body)
    if ok:
        load_settings(path, {})
    else:
        err = fails(path)
        assert err.key == "server.bind" and "inference_keys" in err.message


def test_secure_bind_satisfied_by_env_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "server: {bind: '0.0.0.0:8080'}\n")
    env = {"TENSOR_ROUTER_INFERENCE_KEY": INF, "TENSOR_ROUTER_ADMIN_KEY": ADM}
    assert load_settings(path, env).server.port == 8080


# --- cluster URLs -----------------------------------------------------------------------


def cluster_yaml(**fields: Any) -> str:
    body = {"cluster": {"token": CLU, **fields}}
    return yaml.safe_dump(body)


@pytest.mark.parametrize(
    ("fields", "key", "word"),
    [
        ({"role": "slave", "public_url": "http://10.0.0.2:8080"}, "cluster.master_url", "required"),
        ({"role": "slave", "master_url": "http://10.0.0.1:8080"}, "cluster.public_url", "required"),
        (
            {"role": "master", "slave_urls": ["http://10.0.0.2:8080", "http://10.0.0.2:8080/"]},
            "cluster.slave_urls[1]",
            "overlaps cluster.slave_urls[0]",
        ),
        (
            {"role": "master", "slave_urls": ["http://GPU.lan", "https://gpu.lan:80"]},
            "cluster.slave_urls[1]",
            "overlaps",
        ),
        (
            {"public_url": "http://10.0.0.2:8080", "slave_urls": ["http://10.0.0.2:8080"]},
            "cluster.slave_urls[0]",
            "overlaps cluster.public_url",
        ),
        (
            {
                "role": "slave",
                "public_url": "http://10.0.0.2:8080",
                "master_url": "http://localhost:8080",
            },
            "cluster.master_url",
            "own server.bind",
        ),
        ({"slave_urls": ["http://127.0.0.1:8080"]}, "cluster.slave_urls[0]", "own server.bind"),
        ({"slave_urls": ["ftp://10.0.0.2"]}, "cluster.slave_urls[0]", "http"),
        ({"slave_urls": ["10.0.0.2:8080"]}, "cluster.slave_urls[0]", "http"),
        ({"master_url": "http://u:p@10.0.0.1:8080"}, "cluster.master_url", "credentials"),
        ({"master_url": "http://10.0.0.1:99999"}, "cluster.master_url", "port"),
    ],
)
def test_cluster_url_rules(tmp_path: Path, fields: dict[str, Any], key: str, word: str) -> None:
    err = fails(write(tmp_path, cluster_yaml(**fields)))
    assert (err.key, err.file) == (key, str(tmp_path / "router.yaml"))
    assert word in err.message


def test_cluster_role_needs_a_token(tmp_path: Path) -> None:
    body = "cluster: {role: master, slave_urls: ['http://10.0.0.2:8080']}\n"
    assert fails(write(tmp_path, body)).key == "cluster.token"
    env = {"TENSOR_ROUTER_CLUSTER_TOKEN": CLU}
    assert load_settings(write(tmp_path, body), env).cluster.role == "master"


def test_valid_slave_and_master(tmp_path: Path) -> None:
    slave = cluster_yaml(
        role="slave", public_url="http://127.0.0.1:8080", master_url="http://127.0.0.1:9090"
    )
    assert load_settings(write(tmp_path, slave), {}).cluster.role == "slave"
    master = cluster_yaml(
        role="master", slave_urls=["http://127.0.0.1:8081", "http://127.0.0.1:8082/"]
    )
    assert len(load_settings(write(tmp_path, master), {}).cluster.slave_urls) == 2


# --- durations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("10m", 600), ("2h", 7200), ("250ms", 0.25), ("1d", 86400), ("1.5h", 5400)]
    + [("1h30m", 5400), ("1h 30m", 5400), (" 45 ", 45), ("0", 0), (12, 12), (0.5, 0.5)],
)
def test_parse_duration_examples(text: Any, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


finite = st.floats(min_value=0, allow_nan=False, allow_infinity=False)


@given(st.one_of(finite, st.integers(min_value=0, max_value=2**53)))
def test_any_non_negative_number_round_trips(value: float) -> None:
    assert parse_duration(value) == float(value)
    assert parse_duration(repr(float(value))) == float(value)
    assert parse_duration(f"{float(value)!r}s") == float(value)


@given(
    st.floats(min_value=0, max_value=1e12, allow_nan=False), st.sampled_from(["ms", "m", "h", "d"])
)
def test_units_scale(value: float, unit: str) -> None:
    scale = {"ms": 0.001, "m": 60.0, "h": 3600.0, "d": 86400.0}[unit]
    assert math.isclose(parse_duration(f"{value!r}{unit}"), value * scale, rel_tol=1e-12)


garbage = st.one_of(
    st.text(),
    st.binary(),
    st.none(),
    st.booleans(),
    st.lists(st.integers()),
    st.dictionaries(st.text(), st.integers()),
    st.floats(max_value=-1e-300),
    st.integers(max_value=-1),
    st.integers(min_value=10**400, max_value=10**401),
    st.just(float("nan")),
    st.just(float("inf")),
)


@given(garbage)
def test_garbage_raises_value_error_only(value: Any) -> None:
    try:
        result = parse_duration(value)
    except ValueError:
        return
    # Only real durations may pass: then it is a finite, non-negative number of seconds.
    assert isinstance(value, str) and math.isfinite(result) and result >= 0


@pytest.mark.parametrize(
    "text", ["", "s", "10 minutes", "-5s", "5x", "1h-30m", "inf", "nan", "1e999"]
)
def test_bad_duration_strings(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
