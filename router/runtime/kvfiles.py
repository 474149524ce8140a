"""Saved KV state files on disk: each `.bin` file has a JSON sidecar with its SHA-256, so a
file damaged on disk is deleted instead of being sent to a backend (docs/security.md)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from router.runtime import kvkeys


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


def saved_tokens(folder: Path, name: str) -> int | None:
    """The token count the sidecar records for a file (None when unreadable)."""
    try:
        meta = json.loads(sidecar(folder, name).read_text())
    except (OSError, ValueError):
        return None
    tokens = meta.get("n_saved") if isinstance(meta, dict) else None
    return tokens if isinstance(tokens, int) else None


def commit_slots(folder: Path, key: str, names: list[str]) -> None:
    """Make `names` the key's slot set, then remove its other slot files.

    The manifest is replaced atomically before any removal: a crash before it leaves the old
    set named and whole (the new files are strays), after it the new one (the old files are
    strays); a stray is never restored and goes at the next commit.
    """
    target = _manifest(folder, key)
    if names:
        target.parent.mkdir(mode=0o700, exist_ok=True)
        partial = target.with_suffix(".json.partial")
        partial.write_text(json.dumps({"files": names}))
        partial.chmod(0o600)
        partial.replace(target)
    else:
        target.unlink(missing_ok=True)  # no manifest: an empty set
    for path in folder.glob(f"{key}-*.bin"):
        if path.name not in names and kvkeys.parse_slot_file(path.name) is not None:
            remove(folder, path.name)


def committed_slots(folder: Path, key: str) -> list[str]:
    """The key's current slot files, as its manifest names them (none without one)."""
    try:
        meta = json.loads(_manifest(folder, key).read_text())
    except (OSError, ValueError):
        return []
    files = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(files, list):
        return []
    return [n for n in files if isinstance(n, str) and kvkeys.parse_slot_file(n) is not None]


def _manifest(folder: Path, key: str) -> Path:
    """Beside the runtimes' folders, not in one: a folder holds only what the backend wrote."""
    return folder.parent / "slot-sets" / f"{folder.name}-{key}.json"
