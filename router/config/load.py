"""Load a router.yaml: YAML with line numbers, environment credentials, path resolution and
the rules that span keys (credentials, cluster URLs, the secure-profile bind rule).

Those rules are router/config/policy.py; the schema itself is router/config/schema.py (some
sections and field types in the modules it imports); every error here is a `SettingsError`
naming the key and the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from router.config.policy import check_policy, dotted
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
    check_policy(settings, _Reporter(file, lines, origins))
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
                raise SettingsError(file, dotted((*path, key)), "key appears twice", line=line)
            seen.add(key)
            lines[(*path, key)] = line
            _index_lines(value_node, (*path, key), lines, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, (*path, index), lines, file)


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
    return SettingsError(file, dotted(loc) or _TOP, message, line=_line_for(lines, loc))


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
        key = dotted(loc)
        if key in self.origins:  # the value came from the environment, not the YAML
            origin_file, variable = self.origins[key]
            return SettingsError(origin_file, variable, message)
        return SettingsError(self.file, key, message, line=_line_for(self.lines, loc))


__all__ = ["load_settings", "resolve_config_path"]
