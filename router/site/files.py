"""Model files under `models.file_roots`: the scan, the kind of a file, and path checks.

Everything here is blocking file-system work, called from worker threads. The confinement rule
is one function, `confined`: a path counts only when its fully resolved form (every symlink
followed) lies inside a resolved root, because a check on the spelled path confines nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Extension -> kind; a file with none of these is not listed unless a configuration uses it.
KINDS = {
    ".gguf": "gguf",
    ".safetensors": "safetensors",
    ".bin": "bin",
    ".ggml": "ggml",
    ".pt": "pytorch",
    ".pth": "pytorch",
    ".ckpt": "checkpoint",
    ".onnx": "onnx",
}
MAX_SCAN_FILES = 100_000  # a root holding more is a mistake (a home folder), not a model folder
MAX_PATH_CHARS = 4096


@dataclass(frozen=True, slots=True)
class FileStat:
    """One regular file: where it was found, what it resolves to, and its size and mtime."""

    path: str  # as found under a root (symlinks not followed)
    real: str  # fully resolved; the cache key and the file that is read
    size: int
    mtime_ns: int

    @property
    def stamp(self) -> tuple[int, int]:
        return (self.size, self.mtime_ns)


def kind_of(name: str) -> str:
    return KINDS.get(os.path.splitext(name)[1].lower(), "other")


def real_roots(roots: Iterable[Path]) -> tuple[str, ...]:
    return tuple(os.path.realpath(r) for r in roots)


def confined(real: str, roots: Sequence[str]) -> bool:
    """Is the resolved path `real` inside one of the resolved `roots`?"""
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def stat_file(path: str | os.PathLike[str], roots: Sequence[str] | None = None) -> FileStat | None:
    """The file's stat if it is a regular file (and inside `roots`, when given), else None."""
    try:
        real = os.path.realpath(path)
        if roots is not None and not confined(real, roots):
            return None
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    if not os.path.isfile(real):
        return None
    return FileStat(os.fspath(path), real, st.st_size, st.st_mtime_ns)


def scan_roots(roots: Sequence[Path], extra: Iterable[str] = ()) -> list[FileStat]:
    """Every model file under `roots` (by extension), plus the `extra` paths that lie inside.

    Directory symlinks are not followed (a loop or a link to `/` would never end); a file
    symlink is listed only when its target is inside a root. Dot-entries are partial downloads
    and editor leftovers. The order is stable: by path.
    """
    resolved = real_roots(roots)
    found: dict[str, FileStat] = {}
    for root in roots:
        for folder, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in files:
                if name.startswith(".") or kind_of(name) == "other":
                    continue
                stat = stat_file(os.path.join(folder, name), resolved)
                if stat is not None:
                    found.setdefault(stat.path, stat)
                if len(found) >= MAX_SCAN_FILES:
                    return sorted(found.values(), key=lambda s: s.path)
    for path in extra:
        if path not in found and (stat := stat_file(path, resolved)) is not None:
            found[path] = stat
    return sorted(found.values(), key=lambda s: s.path)


def suspicious(path: str) -> bool:
    """A request-named path that cannot name an inventory file: traversal, NUL, encoded dots."""
    if "\x00" in path or len(path) > MAX_PATH_CHARS:
        return True
    lowered = path.lower()
    if "%2e" in lowered or "%2f" in lowered or "%5c" in lowered or "%00" in lowered:
        return True
    return any(part in ("..", ".") for part in path.replace("\\", "/").split("/"))
