"""Plain `.kcpps` files written by the site routes: names, screening, findings, atomic writes.

Everything written here is checked by `parse_kcpps`, the parser the catalog loads with, so a
file the site routes accept is a file the router serves. The pure parts (names, screening,
findings) take no locks and touch no files; writes go through `router.site.portable.write_atomic`
(temp file in the same folder, fsync, rename, fsync the folder) and deletes through
`remove_file`, in worker threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from router.config import (
    ID_PATTERN,
    MAX_KCPPS_BYTES,
    KcppsError,
    ModelConfig,
    canonical_key,
    parse_kcpps,
    screened_key,
)
from router.domain import BackendMode
from router.errors import BadRequest

Severity = Literal["error", "warning", "info"]
SUFFIX = ".kcpps"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_WHY_REFUSED = {
    "onready": "it runs a shell command",
    "mcpfile": "it starts MCP tool programs",
}


@dataclass(frozen=True)
class Finding:
    """One validation result; `field` names the request field it is about (dotted)."""

    severity: Severity
    code: str
    message: str
    field: str | None = None

    def as_json(self, node_id: str) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "node_id": node_id,
            "field": self.field,
        }


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def first_error(findings: Iterable[Finding]) -> Finding | None:
    return next((f for f in findings if f.severity == "error"), None)


# ---- names ---------------------------------------------------------------------------------


def plain_name(value: Any, param: str) -> str:
    """A file name or ID that is one plain name: no separator, `..`, NUL or control character.

    The same rule as a config ID (docs/kcpps.md, "IDs"), so a name that passes here is a file
    the catalog will serve under that ID; raises BadRequest naming `param`.
    """
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{param} must be a non-empty string", param=param)
    if _CONTROL.search(value):
        raise BadRequest(f"{param} must not contain NUL or control characters", param=param)
    if "/" in value or "\\" in value or ".." in value:
        raise BadRequest(f"{param} must be a plain file name, not a path", param=param)
    stem = value[: -len(SUFFIX)] if param == "filename" and value.endswith(SUFFIX) else value
    if param == "filename" and stem == value:
        raise BadRequest(f"filename must end with {SUFFIX}", param=param)
    if not ID_PATTERN.match(stem):
        raise BadRequest(
            f"{param} must be 1-128 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit",
            param=param,
        )
    return stem


def config_name(body: Mapping[str, Any]) -> tuple[str, str]:
    """(config ID, file name) from a body naming `id` or `filename` (both: they must agree)."""
    ids = []
    if body.get("id") is not None:
        ids.append(plain_name(body["id"], "id"))
    if body.get("filename") is not None:
        ids.append(plain_name(body["filename"], "filename"))
    if not ids:
        raise BadRequest("name the configuration with id or filename", param="id")
    if len(set(ids)) > 1:
        raise BadRequest("id and filename name different configurations", param="filename")
    return ids[0], ids[0] + SUFFIX


def is_path_like(value: str) -> bool:
    """An ID that smuggles a path: separators, `..`, control characters or a drive letter."""
    return bool(
        "/" in value
        or "\\" in value
        or ".." in value
        or _CONTROL.search(value)
        or re.match(r"^[A-Za-z]:", value)
    )


# ---- screening and validation ---------------------------------------------------------------


def screen_options(
    options: Mapping[str, Any], prefix: str = "options"
) -> tuple[dict[str, Any], list[Finding]]:
    """The options to write, under their argparse names, without the keys the loader refuses
    (programs, shell commands) or drops (address, auth, run modes); each one is reported."""
    kept: dict[str, Any] = {}
    findings: list[Finding] = []
    for key, value in options.items():
        name = canonical_key(key)
        field = f"{prefix}.{key}"
        screened = screened_key(name)
        if screened == "refused":
            why = _WHY_REFUSED.get(
                name, "it names a program; backend programs come from router.yaml"
            )
            findings.append(
                Finding("warning", "refused_key", f"{name} is never written: {why}", field)
            )
        elif screened == "dropped":
            findings.append(
                Finding(
                    "info",
                    "router_owned_key",
                    f"{name} is not written: the router sets it itself",
                    field,
                )
            )
        elif name in kept:
            findings.append(
                Finding(
                    "error", "duplicate_key", f"{name} is given twice (in two spellings)", field
                )
            )
        else:
            kept[name] = value
    return kept, findings


def render(options: Mapping[str, Any]) -> bytes:
    """The file's bytes: pretty-printed JSON, ASCII with escapes as KoboldCpp saves one (which
    also keeps a lone surrogate from a client's JSON writable)."""
    return (json.dumps(options, indent=2) + "\n").encode("ascii")


def check_config(
    path: Path,
    options: Mapping[str, Any],
    default_mode: BackendMode,
    file_roots: Sequence[Path],
    prefix: str = "options",
) -> tuple[ModelConfig | None, list[Finding]]:
    """Parse `render(options)` as the catalog would load it from `path` (blocking: the parser
    resolves symlinks when `file_roots` confine model paths)."""
    try:
        config = parse_kcpps(path, render(options), default_mode, file_roots)
    except KcppsError as exc:
        message = str(exc)
        return None, [
            Finding("error", "invalid_config", message, _field_of(message, prefix, options))
        ]
    warnings = [
        Finding("warning", "lane_ignored", w, _field_of(w, prefix, options))
        for w in config.warnings
    ]
    return config, warnings


def _field_of(message: str, prefix: str, keys: Iterable[str]) -> str:
    # The parser's messages start with the key they are about ("sdmodel is a URL; ...").
    first = message.split(" ", 1)[0]
    return f"{prefix}.{first}" if first in set(keys) else prefix


def catalog_findings(
    config: ModelConfig, others: Iterable[ModelConfig], missing: Iterable[str], prefix: str
) -> list[Finding]:
    """What the catalog would say beside the parser: ID clashes with other files, absent files."""
    findings: list[Finding] = []
    mine = set(config.names)  # IDs and router_aliases
    for other in others:
        if other.path.name == config.path.name:
            continue
        clash = mine & set(other.names)
        if clash:
            findings.append(
                Finding(
                    "error",
                    "id_clash",
                    f"model name {min(clash)!r} is already used by {other.path.name}",
                    prefix,
                )
            )
    for key in missing:
        findings.append(
            Finding(
                "warning",
                "missing_file",
                f"{key} names a file that does not exist yet; loading will fail until it does",
                f"{prefix}.{key.split('[')[0]}",
            )
        )
    return findings


# ---- writing (blocking; run in a worker thread) ---------------------------------------------


def remove_file(folder: Path, name: str) -> None:
    os.unlink(folder / name)
    fsync_folder(folder)


def fsync_folder(folder: Path) -> None:
    """Make a rename or unlink in `folder` durable (not every file system lets a folder sync)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def existing(path: Path) -> bytes | None:
    """The current bytes of the file at `path` (enough to compare with a new one), None when
    absent. OSError when it is not a regular file: a symlink, folder or FIFO is left alone
    (reading a FIFO would block; replacing a symlink would silently retarget it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path.name} is not a regular file")
    with open(path, "rb") as fh:
        return fh.read(MAX_KCPPS_BYTES + 1)  # a larger file differs from anything we write
