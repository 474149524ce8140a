"""Portable `.kcpps`: model paths replaced by content hashes, and back.

Export replaces every component path field `<field>` by `<field>_hash` (64 lowercase hex) and
`<field>_filename` (the bare file name); list fields (`lora`, `sdlora`) become two parallel
lists. Resolution finds each hash on this node and writes the paths back; a field that does
not resolve is reported by name and nothing is written. Pure (files are written with `router.config.files.write_atomic`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from router.config.kcpps import AUX_COMPONENTS, LIST_COMPONENTS, MAIN_COMPONENTS

SHA256 = re.compile(r"^[0-9a-f]{64}$")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._ +()-]{0,254}$")
PATH_FIELDS = (*MAIN_COMPONENTS, *sorted(AUX_COMPONENTS))
_INDEXED = re.compile(r"^(?P<field>[a-z0-9_]+)\[(?P<pos>\d+)\]$")


class PortableError(ValueError):
    """A field that cannot be made portable or read back; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Slot:
    """One file reference of a portable config: `position` is None for a single-path field."""

    field: str
    position: int | None
    sha256: str
    filename: str

    @property
    def label(self) -> str:
        return self.field if self.position is None else f"{self.field}[{self.position}]"


def split_key(key: str) -> tuple[str, int | None]:
    """`sdlora[1]` -> ("sdlora", 1); `model_param` -> ("model_param", None)."""
    m = _INDEXED.match(key)
    return (m["field"], int(m["pos"])) if m else (key, None)


def export_portable(
    raw: Mapping[str, Any], components: Mapping[str, Path], hashes: Mapping[str, str]
) -> dict[str, Any]:
    """The portable form of a config: `hashes` maps component keys (`lora[0]`) to SHA-256."""
    out = {k: v for k, v in raw.items() if not k.endswith(("_hash", "_filename"))}
    grouped: dict[str, list[tuple[int | None, Path]]] = {}
    for key, path in components.items():
        field, position = split_key(key)
        grouped.setdefault(field, []).append((position, path))
    for field, entries in grouped.items():
        entries.sort(key=lambda e: -1 if e[0] is None else e[0])
        shas, names = [], []
        for position, path in entries:
            key = field if position is None else f"{field}[{position}]"
            if key not in hashes:
                raise PortableError(key, "the file has no hash yet (missing or unreadable)")
            shas.append(hashes[key])
            names.append(path.name)
        out.pop(field, None)
        listed = field in LIST_COMPONENTS and isinstance(raw.get(field), list)
        out[f"{field}_hash"] = shas if listed else shas[0]
        out[f"{field}_filename"] = names if listed else names[0]
    return out


def portable_slots(doc: Mapping[str, Any]) -> list[Slot]:
    """Every hash reference in a portable config; PortableError names a malformed field."""
    slots: list[Slot] = []
    for field in PATH_FIELDS:
        if f"{field}_hash" not in doc:
            continue
        hashes, names = doc[f"{field}_hash"], doc.get(f"{field}_filename")
        pairs: list[tuple[int | None, Any, Any]]
        if isinstance(hashes, list):
            if not isinstance(names, list) or len(names) != len(hashes):
                raise PortableError(field, f"{field}_filename must list one name per hash")
            pairs = [(i, h, n) for i, (h, n) in enumerate(zip(hashes, names, strict=True))]
        else:
            pairs = [(None, hashes, names)]
        for position, sha, name in pairs:
            label = field if position is None else f"{field}[{position}]"
            if not isinstance(sha, str) or not SHA256.match(sha):
                raise PortableError(label, "the hash must be 64 lowercase hex digits")
            if not isinstance(name, str) or not SAFE_NAME.match(name):
                raise PortableError(label, "the file name must be a bare, safe file name")
            slots.append(Slot(field, position, sha, name))
    return slots


def runnable(doc: Mapping[str, Any], paths: Mapping[str, str]) -> dict[str, Any]:
    """The portable config with each slot's resolved path (`paths`: slot label -> path)."""
    out = dict(doc)
    for slot in portable_slots(doc):
        out.pop(f"{slot.field}_hash", None)
        out.pop(f"{slot.field}_filename", None)
        path = paths[slot.label]
        if slot.position is None:
            out[slot.field] = path
        else:
            listed = out.get(slot.field)
            items = list(listed) if isinstance(listed, list) else []
            items.extend([""] * (slot.position + 1 - len(items)))
            items[slot.position] = path
            out[slot.field] = items
    return out
