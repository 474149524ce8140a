"""Load a router.yaml: YAML with line numbers, environment credentials, path resolution and
the rules that span keys (credentials, cluster URLs, the secure-profile bind rule).

The schema itself is router/config/schema.py (some sections and field types in the modules it
imports); every error here is a `SettingsError` naming the key and the file.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ValidationError

from router.config.addresses import is_ip, split_bind
from router.config.schema import PROGRAM_SECTIONS, ProgramSection, Settings, SettingsError


def resolve_config_path(cli_value: str | None, env: Mapping[str, str] | None = None) -> Path | None:
    """`--config` if given, else `TENSOR_ROUTER_CONFIG`, else None (built-in defaults)."""
    env = os.environ if env is None else env
    value = cli_value if cli_value else env.get("TENSOR_ROUTER_CONFIG", "").strip()
    return Path(value).expanduser() if value else None


def load_settings(path: Path | None, env: Mapping[str, str] | None = None) -> Settings:
    """Read, validate and resolve a router.yaml (or the defaults when `path` is None)."""
    env = os.environ if env is None else env
    path = Path(path) if path is not None else None
    file = str(path) if path is not None else "(built-in defaults)"
    data, lines = _read_yaml(path, file) if path is not None else ({}, {})
    data = _normalize(data, file, lines)
    origins = _apply_env_credentials(data, env)
    try:
        settings = Settings.model_validate(data)
    except ValidationError as err:
        raise _settings_error(err, file, lines) from None
    base = path.expanduser().absolute().parent if path is not None else Path.cwd()
    settings = _resolve_paths(settings, base, path)
    _check_policy(settings, file, lines, origins)
    return settings


Lines = dict[tuple[str | int, ...], int]
_SYNTAX, _TOP = "(yaml syntax)", "(top level)"


def _read_yaml(path: Path, file: str) -> tuple[Any, Lines]:
    """Parse the YAML once into nodes (for line numbers and duplicate keys), then into data."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SettingsError(file, "(file)", "no such file") from None
    except IsADirectoryError:
        raise SettingsError(file, "(file)", "is a folder, not a YAML file") from None
    except UnicodeDecodeError:
        raise SettingsError(file, "(file)", "is not UTF-8 text") from None
    except OSError as err:
        raise SettingsError(file, "(file)", f"cannot be read: {err.strerror}") from None
    loader = yaml.SafeLoader(text)
    lines: Lines = {}
    try:
        node = loader.get_single_node()
        if node is None:
            return None, lines
        _index_lines(node, (), lines, file)
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = err.problem or err.context or "cannot parse"
        raise SettingsError(file, _SYNTAX, f"YAML syntax error: {problem}", line=line) from None
    except yaml.YAMLError as err:
        raise SettingsError(file, _SYNTAX, f"YAML error: {err}") from None
    finally:
        loader.dispose()


def _index_lines(node: yaml.Node, path: tuple[str | int, ...], lines: Lines, file: str) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key, line = str(key_node.value), key_node.start_mark.line + 1
            if key in seen:
                # PyYAML would silently keep the last one; a doubled section is a typo.
                raise SettingsError(file, _dotted((*path, key)), "key appears twice", line=line)
            seen.add(key)
            lines[(*path, key)] = line
            _index_lines(value_node, (*path, key), lines, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, (*path, index), lines, file)


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _normalize(data: Any, file: str, lines: Lines) -> dict[str, Any]:
    """Top level must be a mapping; empty sections mean defaults; fold the token alias."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        message = f"the file must be a mapping of sections (server:, auth:, ...), not {kind}"
        raise SettingsError(file, _TOP, message, line=1)
    out: dict[Any, Any] = {}
    for key, value in data.items():
        if key == "source":  # a model field set by the loader, never by the file
            raise SettingsError(file, "source", "unknown key", line=lines.get(("source",)))
        out[key] = {} if value is None else (dict(value) if isinstance(value, dict) else value)
    auth, cluster = out.get("auth"), out.setdefault("cluster", {})
    if isinstance(auth, dict) and isinstance(cluster, dict) and "cluster_token" in auth:
        alias = auth.pop("cluster_token")
        where = lines.get(("auth", "cluster_token"))
        if alias is not None and cluster.get("token") is not None:
            message = (
                "set the cluster token once, as cluster.token (auth.cluster_token is an alias)"
            )
            raise SettingsError(file, "auth.cluster_token", message, line=where)
        if alias is not None:
            cluster["token"] = alias
            if where is not None:
                lines[("cluster", "token")] = where
    return out


_ENV_CREDENTIALS = (
    ("TENSOR_ROUTER_INFERENCE_KEY", "auth", "inference_keys"),
    ("TENSOR_ROUTER_ADMIN_KEY", "auth", "admin_keys"),
    ("TENSOR_ROUTER_CLUSTER_TOKEN", "cluster", "token"),
    ("TENSOR_ROUTER_HF_TOKEN", "downloads", "token"),
)
_ENVIRONMENT = "(environment)"


def _apply_env_credentials(
    data: dict[str, Any], env: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """Add env keys to the YAML lists (the cluster token replaces); return key -> (file, var)."""
    origins: dict[str, tuple[str, str]] = {}
    for name, section, field in _ENV_CREDENTIALS:
        found = _env_credential(env, name)
        target = data.setdefault(section, {})
        if found is None or not isinstance(target, dict):
            continue  # a malformed section is reported by the schema
        value, origin = found
        if field == "token":
            target[field] = value
            origins[f"{section}.token"] = origin
            continue
        existing = target.get(field) or []
        if isinstance(existing, list):
            target[field] = [*existing, value]
            origins[f"auth.{field}[{len(existing)}]"] = origin
    return origins


def _env_credential(env: Mapping[str, str], name: str) -> tuple[str, tuple[str, str]] | None:
    direct, file_var = env.get(name), env.get(f"{name}_FILE")
    if direct is not None and file_var is not None:
        raise SettingsError(_ENVIRONMENT, name, f"set {name} or {name}_FILE, not both")
    if direct is not None:
        return direct.strip(), (_ENVIRONMENT, name)
    if file_var is None:
        return None
    path = Path(file_var).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or "not UTF-8 text"
        raise SettingsError(str(path), f"{name}_FILE", f"cannot read: {reason}") from None
    if len([line for line in text.splitlines() if line.strip()]) > 1:
        raise SettingsError(str(path), f"{name}_FILE", "must hold exactly one key on one line")
    return text.strip(), (str(path), f"{name}_FILE")


def _settings_error(err: ValidationError, file: str, lines: Lines) -> SettingsError:
    """First schema error -> SettingsError with a plain-words message and the YAML line."""
    errors = err.errors(include_url=False)
    first = errors[0]
    # Drop pydantic's internal schema tags (e.g. "function-after[...]") from the location.
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and "[" in p))
    message = _explain(first["type"], first["msg"], loc)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem(s))"
    return SettingsError(file, _dotted(loc) or _TOP, message, line=_line_for(lines, loc))


def _explain(kind: str, msg: str, loc: tuple[Any, ...]) -> str:
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        return "unknown key" + (f"; expected one of: {', '.join(allowed)}" if allowed else "")
    if kind in ("tuple_type", "list_type"):
        return "expected a list"
    if kind in ("dict_type", "model_type", "model_attributes_type", "mapping_type"):
        return "expected a mapping (a section of keys)"
    if kind == "string_type":
        return "expected a string (quote the value in YAML)"
    return msg.removeprefix("Value error, ")


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = Settings
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return sorted(name for name in model.model_fields if name != "source")


def _line_for(lines: Lines, loc: tuple[Any, ...]) -> int | None:
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _absolute(value: Path | None, base: Path) -> Path | None:
    if value is None:
        return None
    value = value.expanduser()
    return value if value.is_absolute() else Path(os.path.normpath(base / value))


def _resolve_paths(settings: Settings, base: Path, path: Path | None) -> Settings:
    """Relative paths -> absolute against the YAML's folder (or the current directory)."""
    models = settings.models
    database = settings.analytics.database_path or Path("data/router.sqlite")
    update: dict[str, Any] = {
        "models": models.model_copy(
            update={
                "config_dir": _absolute(models.config_dir, base),
                "file_roots": tuple(_absolute(root, base) for root in models.file_roots),
            }
        ),
        "analytics": settings.analytics.model_copy(
            update={"database_path": _absolute(database, base)}
        ),
        "media": settings.media.model_copy(
            update={"scratch_dir": _absolute(settings.media.scratch_dir, base)}
        ),
        "setup": settings.setup.model_copy(
            update={"recipes_file": _absolute(settings.setup.recipes_file, base)}
        ),
        "source": path.expanduser().absolute() if path is not None else None,
        "downloads": settings.downloads.model_copy(
            update={"dir": _absolute(settings.downloads.dir, base)}
        ),
    }
    for name in PROGRAM_SECTIONS.values():
        section: ProgramSection = getattr(settings, name)
        update[name] = section.model_copy(
            update={
                "binary_path": _absolute(section.binary_path, base),
                "data_dir": _absolute(section.data_dir, base),
            }
        )
    return settings.model_copy(update=update)


class _Reporter:
    """Builds SettingsErrors for checks that run on validated Settings."""

    def __init__(self, file: str, lines: Lines, origins: Mapping[str, tuple[str, str]]) -> None:
        self.file, self.lines, self.origins = file, lines, origins

    def error(self, loc: tuple[str | int, ...], message: str) -> SettingsError:
        key = _dotted(loc)
        if key in self.origins:  # the value came from the environment, not the YAML
            origin_file, variable = self.origins[key]
            return SettingsError(origin_file, variable, message)
        return SettingsError(self.file, key, message, line=_line_for(self.lines, loc))


def _check_policy(
    settings: Settings, file: str, lines: Lines, origins: Mapping[str, tuple[str, str]]
) -> None:
    report = _Reporter(file, lines, origins)
    _check_credentials(settings, report)
    _check_secure_bind(settings, report)
    _check_cors_wildcard(settings, report)
    _check_cluster(settings, report)
    _check_extra_args(settings, report)
    config_dir = settings.models.config_dir
    if not config_dir.is_dir():
        problem = "is not a folder" if config_dir.exists() else "does not exist"
        message = f"{config_dir} {problem}; create it and put the .kcpps files there"
        raise report.error(("models", "config_dir"), message)


_PLACEHOLDERS = frozenset(
    {"changeme", "example", "password", "secret", "token", "key", "apikey", "none", "null"}
    | {"todo", "tbd", "default", "placeholder", "dummy", "foo", "bar", "foobar", "abc", "123"}
)
_PLACEHOLDER_PARTS = (
    *("changeme", "replaceme", "yourkey", "yourtoken", "yoursecret", "yourapikey"),
    *("yourpassword", "placeholder", "example", "password", "secret", "insertkey"),
)


def placeholder_reason(value: str) -> str | None:
    """Why `value` cannot be a real credential, or None when it might be one."""
    if not value.strip():
        return "is empty"
    if "${" in value or (value.startswith("<") and value.endswith(">")):
        return "is an unfilled template"
    if any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in value):
        return "may only contain visible ASCII characters, without spaces"
    folded = re.sub(r"[^a-z0-9]", "", value.lower())
    if folded in _PLACEHOLDERS or len(set(folded)) <= 1 or folded.startswith("xxx"):
        return "is a placeholder"
    if any(part in folded for part in _PLACEHOLDER_PARTS):
        return "looks like a placeholder"
    return None


def _check_credentials(settings: Settings, report: _Reporter) -> None:
    """No placeholders; every key distinct within and across the inference/admin/cluster roles."""
    entries: list[tuple[tuple[str | int, ...], str]] = [
        *((("auth", "inference_keys", i), k) for i, k in enumerate(settings.auth.inference_keys)),
        *((("auth", "admin_keys", i), k) for i, k in enumerate(settings.auth.admin_keys)),
    ]
    if settings.cluster.token is not None:
        entries.append((("cluster", "token"), settings.cluster.token))
    seen: dict[str, tuple[str | int, ...]] = {}
    for loc, value in entries:
        reason = placeholder_reason(value)
        if reason:
            hint = "generate one, e.g. `openssl rand -hex 32`"
            raise report.error(loc, f"credential {reason}; {hint}")
        first = seen.setdefault(value, loc)
        if first is not loc:
            other = report.origins.get(_dotted(first), ("", _dotted(first)))[1]
            same_role = first[:2] == loc[:2]
            what = "duplicate of" if same_role else "reused: the same credential is"
            raise report.error(loc, f"{what} {other}; each role needs its own key")


def _is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_secure_bind(settings: Settings, report: _Reporter) -> None:
    host = settings.server.host
    if settings.security.profile != "secure" or _is_loopback_host(host):
        return
    if not settings.auth.inference_keys or not settings.auth.admin_keys:
        message = (
            f"binding {host} (not loopback) under security.profile secure needs at least one "
            "auth.inference_keys and one auth.admin_keys entry (or TENSOR_ROUTER_INFERENCE_KEY "
            "and TENSOR_ROUTER_ADMIN_KEY)"
        )
        raise report.error(("server", "bind"), message)


def _check_cors_wildcard(settings: Settings, report: _Reporter) -> None:
    """`*` lets any web page call the model APIs: only where a key is needed to do so."""
    origins = settings.server.cors_origins
    if "*" not in origins:
        return
    loc = ("server", "cors_origins", origins.index("*"))
    if settings.security.profile != "secure" or not settings.auth.inference_keys:
        message = (
            "'*' (any web page) is allowed only under security.profile secure with at least "
            "one auth.inference_keys entry; list the exact origins instead"
        )
        raise report.error(loc, message)


def _url_identity(url: str) -> tuple[str, int, str]:
    """(host, port, path) of a cluster base URL; ValueError with the reason when unusable."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials (the cluster token is sent separately)")
    if parts.query or parts.fragment:
        raise ValueError("must not have a query or fragment")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ValueError("has a bad port") from None
    host = parts.hostname
    host = str(ipaddress.ip_address(host)) if is_ip(host) else host.rstrip(".")
    return host, port, parts.path.rstrip("/")


def _points_at_bind(host: str, port: int, bind_host: str, bind_port: int) -> bool:
    """True when a URL reaches this router's own listener (as far as can be told without DNS)."""
    if port != bind_port:
        return False
    if host == bind_host.lower() or (_is_loopback_host(host) and _is_loopback_host(bind_host)):
        return True
    return bind_host in ("0.0.0.0", "::") and _is_loopback_host(host)


def _check_cluster(settings: Settings, report: _Reporter) -> None:
    cluster = settings.cluster
    if cluster.role == "slave":
        for name in ("master_url", "public_url"):
            if not getattr(cluster, name):
                raise report.error(("cluster", name), "required when cluster.role is slave")
    if cluster.role != "standalone" and not cluster.token:
        message = f"required when cluster.role is {cluster.role} (or TENSOR_ROUTER_CLUSTER_TOKEN)"
        raise report.error(("cluster", "token"), message)
    urls: list[tuple[tuple[str | int, ...], str | None]] = [
        (("cluster", "public_url"), cluster.public_url),
        (("cluster", "master_url"), cluster.master_url),
        *((("cluster", "slave_urls", i), url) for i, url in enumerate(cluster.slave_urls)),
    ]
    bind_host, bind_port = split_bind(settings.server.bind)
    seen: dict[tuple[str, int, str], tuple[str | int, ...]] = {}
    for loc, url in urls:
        if url is None:
            continue
        try:
            identity = _url_identity(url)
        except ValueError as err:
            raise report.error(loc, str(err)) from None
        if identity in seen:
            raise report.error(
                loc, f"overlaps {_dotted(seen[identity])} (same host, port and path)"
            )
        seen[identity] = loc
        # public_url is this node's own advertised address, so only peers are checked for self.
        if loc[1] != "public_url" and _points_at_bind(*identity[:2], bind_host, bind_port):
            raise report.error(
                loc, f"points at this router's own server.bind {settings.server.bind}"
            )


# Flags the router sets itself; letting extra_args repeat them would move or expose a backend.
_MANAGED_FLAGS = ("--host", "--port", "--api-key", "--api-key-file", "--uds")
_MANAGED_BY_SECTION = {
    "kobold": ("--config", "--onready", "--allow-config-onready", "--password"),
    "sdcpp": ("--listen-ip", "--listen-port", "-l"),
}


def _check_extra_args(settings: Settings, report: _Reporter) -> None:
    for name in PROGRAM_SECTIONS.values():
        section: ProgramSection = getattr(settings, name)
        refused = _MANAGED_FLAGS + _MANAGED_BY_SECTION.get(name, ())
        for index, arg in enumerate(section.extra_args):
            flag = arg.split("=", 1)[0]
            if flag in refused:
                message = f"{flag} is set by the router and cannot be overridden"
                raise report.error((name, "extra_args", index), message)


__all__ = ["load_settings", "placeholder_reason", "resolve_config_path"]
