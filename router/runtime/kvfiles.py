"""Saved KV state files on disk: each `.bin` file has a JSON sidecar with its SHA-256, so a
file damaged on disk is deleted instead of being sent to a backend (docs/security.md)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def sidecar(folder: Path, name: str) -> Path:
    return folder / (name.removesuffix(".bin") + ".json")


def write_sidecar(folder: Path, name: str, data: dict[str, Any]) -> None:
    target = sidecar(folder, name)
    partial = target.with_suffix(".json.partial")
    partial.write_text(json.dumps(data))
    partial.replace(target)  # atomic: a sidecar is whole or absent


def seal(folder: Path, name: str, tokens: int) -> None:
    """Record a file the backend just wrote: owner-only, and its checksum in the sidecar."""
    with contextlib.suppress(OSError):
        (folder / name).chmod(0o600)
    write_sidecar(folder, name, {"sha256": sha256(folder / name), "n_saved": tokens})


def intact(folder: Path, name: str) -> bool:
    try:
        meta = json.loads(sidecar(folder, name).read_text())
        return isinstance(meta, dict) and meta.get("sha256") == sha256(folder / name)
    except (OSError, ValueError):
        return False


def remove(folder: Path, name: str) -> None:
    for path in (folder / name, sidecar(folder, name)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
