"""Where built backends live, and the atomic swap that puts a new build in service.

    <root>/bin/<export>           -> ../<id>/current/<binary>  (what the loader finds)
    <root>/<id>/current           -> builds/<build>            (one symlink, replaced by rename)
    <root>/<id>/builds/<build>/   one prefix per build; `.build.json` records what it is
    <root>/<id>/work-<build>/     scratch while it builds, always deleted
    <root>/<id>/.lock             flock held by whoever builds (make or the router)
    <root>/src/                   downloaded sdists, shared

`<root>` is TENSOR_ROUTER_BACKENDS_DIR (default ~/.cache/tensor-router/backends). A build
writes only into its own new prefix; nothing the loader reads changes until `promote`, which
renames a new `current` link over the old one. A backend already running keeps its open
files; the next launch resolves the link to the new build. The two builds before the current
one are kept (a runtime started from one may still be running), older ones are deleted.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.base import built_backends_dir
from backends.recipes import Recipe

BUILD_RECORD = ".build.json"
KEEP_OLD_BUILDS = 2


class Busy(Exception):
    """Another process holds the backend's build lock."""


@dataclass(frozen=True)
class Layout:
    root: Path
    backend_id: str

    @classmethod
    def default(cls, backend_id: str) -> Layout:
        return cls(built_backends_dir(), backend_id)

    @property
    def home(self) -> Path:
        return self.root / self.backend_id

    @property
    def builds(self) -> Path:
        return self.home / "builds"

    @property
    def current(self) -> Path:
        return self.home / "current"

    @property
    def cache(self) -> Path:
        return self.root / "src"

    def exported(self, recipe: Recipe) -> Path | None:
        return self.root / "bin" / recipe.export if recipe.export else None

    def new_build(self) -> tuple[Path, Path]:
        """A fresh (prefix, work) pair; the prefix is empty and nothing points at it yet."""
        # Sortable by age (old_builds relies on it), unique with the random tail.
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"{stamp}-{secrets.token_hex(3)}"
        self.builds.mkdir(parents=True, exist_ok=True)
        prefix, work = self.builds / name, self.home / f"work-{name}"
        prefix.mkdir()
        work.mkdir()
        return prefix, work

    def installed_binary(self, recipe: Recipe) -> Path | None:
        """The file the loader would run: the current build's, else a file left at the
        export path by an older build script."""
        if self.current.exists():
            return recipe.binary_in(self.current)
        exported = self.exported(recipe)
        return exported if exported is not None and exported.exists() else None

    def record(self) -> dict[str, Any] | None:
        """What the current build recorded at promotion (version, when, probe output)."""
        try:
            data = json.loads((self.current / BUILD_RECORD).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    @contextlib.contextmanager
    def lock(self, *, wait: bool) -> Iterator[None]:
        """The backend's build lock across processes; Busy when taken and not `wait`."""
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.home / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise Busy(f"another process is building {self.backend_id}") from None
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock


def _replace_link(link: Path, target: str) -> None:
    """Point `link` at `target` in one rename: a reader sees the old target or the new one."""
    tmp = link.with_name(f".{link.name}.{secrets.token_hex(4)}")
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def promote(layout: Layout, prefix: Path, recipe: Recipe, record: dict[str, Any]) -> None:
    """Make `prefix` the current build and export its binary (blocking; quick)."""
    (prefix / BUILD_RECORD).write_text(json.dumps(record, indent=1), "utf-8")
    _replace_link(layout.current, os.path.relpath(prefix, layout.home))
    exports = [(layout.exported(recipe), recipe.binary)]
    exports += [(layout.root / "bin" / c.export, c.binary) for c in recipe.companions]
    for exported, binary in exports:
        if exported is not None:
            exported.parent.mkdir(parents=True, exist_ok=True)
            target = layout.current / binary
            _replace_link(exported, os.path.relpath(target, exported.parent))


def old_builds(layout: Layout) -> list[Path]:
    """Builds to delete, asked while holding the lock: any without a record (left by a build
    that was killed) and the finished ones before the current one and KEEP_OLD_BUILDS more."""
    current = layout.current.resolve() if layout.current.exists() else None
    others = [p for p in layout.builds.glob("*") if p != current]
    done = sorted((p for p in others if (p / BUILD_RECORD).exists()), key=lambda p: p.name)
    unfinished = [p for p in others if not (p / BUILD_RECORD).exists()]
    works = list(layout.home.glob("work-*"))
    return unfinished + works + (done[:-KEEP_OLD_BUILDS] if len(done) > KEEP_OLD_BUILDS else [])


def discard(*paths: Path) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
