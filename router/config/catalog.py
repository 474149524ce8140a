"""The set of ModelConfigs found in `models.config_dir`: IDs, availability, disabled state.

All file I/O runs in worker threads so the event loop never waits on a disk. Model files are
hashed by one background task, one file at a time (a GPU box's disk is better read serially),
and each finished hash is folded into the configs that reference that file.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from router.config.kcpps import MAX_KCPPS_BYTES, parse_kcpps
from router.config.model_config import KcppsError, ModelConfig
from router.domain import BackendMode, Lane
from router.errors import BadRequest, ModelNotFound

log = logging.getLogger(__name__)

StateCallback = Callable[[str, bool], Awaitable[None]]
ChangeCallback = Callable[["CatalogChange"], None]
_HashKey = tuple[str, int, int]  # (resolved path, size, mtime_ns)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class CatalogChange:
    """What one refresh changed, by config ID (the file stem)."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)  # file name -> message, after


@dataclass(frozen=True)
class _FileState:
    real: str
    size: int
    mtime_ns: int
    is_file: bool  # False for a folder (a vLLM model directory): present, never hashed

    @property
    def key(self) -> _HashKey:
        return (self.real, self.size, self.mtime_ns)


@dataclass
class _Entry:
    stamp: tuple[int, int]  # (size, mtime_ns) of the .kcpps when it was parsed
    config: ModelConfig | None
    error: str | None


class Catalog:
    def __init__(
        self,
        config_dir: Path,
        default_mode: BackendMode,
        file_roots: Sequence[Path] = (),
        *,
        on_state_change: StateCallback | None = None,
        on_change: ChangeCallback | None = None,
    ) -> None:
        self.config_dir = config_dir
        self.default_mode = default_mode
        # Held by every route that writes a file here (router/api/site_configs.py), so
        # "exists?" and "write" cannot interleave with another write.
        self.write_lock = asyncio.Lock()
        self.file_roots = tuple(file_roots)
        self.on_state_change = on_state_change
        # Told of every refresh that changed the set or the errors, whichever caller ran it
        # (the poll watcher or a site route), so each change is announced exactly once.
        self.on_change = on_change
        self._entries: dict[str, _Entry] = {}  # file name -> parse result
        self._by_id: dict[str, str] = {}  # text or image ID -> file name
        self._collisions: dict[str, str] = {}  # file name -> message
        self._dir_error: str | None = None
        self._disabled: set[str] = set()
        self._probes: dict[Path, _FileState | None] = {}
        self._hashes: dict[_HashKey, str] = {}
        self._hash_failed: set[_HashKey] = set()
        self._hash_task: asyncio.Task[None] | None = None
        self._stop = threading.Event()
        self._lock = asyncio.Lock()

    # ---- scanning -------------------------------------------------------------------------

    async def refresh(self) -> CatalogChange:
        """Rescan the folder; reparse only files whose size or mtime changed."""
        async with self._lock:
            before = self._fingerprints()
            errors_before = self.errors
            try:
                listing = await asyncio.to_thread(_scan, self.config_dir)
            except OSError as exc:
                # Keep serving what we had: a folder that vanished for a moment (network
                # mount, editor rename) should not unload every model.
                self._dir_error = f"cannot list the config folder: {exc.strerror or exc}"
                log.error("model catalog: %s", self._dir_error)
                return CatalogChange(errors=self.errors)
            self._dir_error = None
            for name in set(self._entries) - set(listing):
                del self._entries[name]
            for name, stamp in sorted(listing.items()):
                entry = self._entries.get(name)
                if entry is None or entry.stamp != stamp:
                    self._entries[name] = await self._load(name, stamp)
            self._reindex()
            self._probes = await asyncio.to_thread(_probe_all, self._component_paths())
            self._prune_hashes()
            self._apply_hashes()
            self._kick_hasher()
            change = self._change(before)
            if self.on_change is not None and (
                change.added or change.changed or change.removed or change.errors != errors_before
            ):
                self.on_change(change)
            return change

    async def watch(self, interval: float) -> None:
        """Refresh every `interval` seconds until cancelled; a failed pass is logged."""
        while True:
            try:
                await self.refresh()
            except Exception:
                log.exception("model catalog refresh failed")
            await asyncio.sleep(interval)

    async def close(self) -> None:
        """Stop background hashing (a hash in progress stops at its next chunk)."""
        self._stop.set()
        task, self._hash_task = self._hash_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _load(self, name: str, stamp: tuple[int, int]) -> _Entry:
        path = self.config_dir / name
        try:
            if stamp[0] > MAX_KCPPS_BYTES:
                raise KcppsError(f"file is larger than {MAX_KCPPS_BYTES} bytes")
            config = await asyncio.to_thread(self._read_parse, path)
        except KcppsError as exc:
            log.warning("model catalog: skipping %s: %s", name, exc)
            return _Entry(stamp, None, str(exc))
        except OSError as exc:
            message = f"cannot read the file: {exc.strerror or type(exc).__name__}"
            log.warning("model catalog: skipping %s: %s", name, message)
            return _Entry(stamp, None, message)
        return _Entry(stamp, config, None)

    def _read_parse(self, path: Path) -> ModelConfig:
        return parse_kcpps(path, path.read_bytes(), self.default_mode, self.file_roots)

    def _reindex(self) -> None:
        """Map IDs to files; on a clash the file later in name order is skipped."""
        by_id: dict[str, str] = {}
        collisions: dict[str, str] = {}
        for name, entry in sorted(self._entries.items()):
            if entry.config is None:
                continue
            ids = list(entry.config.names)
            clash = next((i for i in ids if i in by_id), None)
            if clash is not None:
                collisions[name] = (
                    f"model name {clash!r} is claimed by both {by_id[clash]} and {name} (an ID "
                    f"or router_aliases entry); {name} is not served until one of them changes"
                )
                if self._collisions.get(name) != collisions[name]:
                    log.warning("model catalog: skipping %s: %s", name, collisions[name])
                continue
            by_id.update(dict.fromkeys(ids, name))
        self._by_id, self._collisions = by_id, collisions

    def _fingerprints(self) -> dict[str, tuple[str, str]]:
        return {c.id: (c.path.name, c.config_sha256) for c in self.all_configs()}

    def _change(self, before: Mapping[str, tuple[str, str]]) -> CatalogChange:
        after = self._fingerprints()
        return CatalogChange(
            added=tuple(sorted(after.keys() - before.keys())),
            changed=tuple(sorted(i for i in after.keys() & before.keys() if after[i] != before[i])),
            removed=tuple(sorted(before.keys() - after.keys())),
            errors=self.errors,
        )

    # ---- asset hashes ---------------------------------------------------------------------

    def _component_paths(self) -> set[Path]:
        return {p for c in self.all_configs() for p in c.components.values()}

    def _prune_hashes(self) -> None:
        live = {s.key for s in self._probes.values() if s is not None}
        self._hashes = {k: v for k, v in self._hashes.items() if k in live}
        self._hash_failed &= live

    def _apply_hashes(self) -> None:
        for entry in self._entries.values():
            config = entry.config
            if config is None:
                continue
            found = {}
            for key, path in config.components.items():
                state = self._probes.get(path)
                if state is not None and state.key in self._hashes:
                    found[key] = self._hashes[state.key]
            if found != dict(config.asset_sha256):
                entry.config = dataclasses.replace(config, asset_sha256=found)

    def _pending_hashes(self) -> list[_HashKey]:
        keys = {s.key for s in self._probes.values() if s is not None and s.is_file}
        return sorted(keys - self._hashes.keys() - self._hash_failed)

    def _kick_hasher(self) -> None:
        if self._stop.is_set() or not self._pending_hashes():
            return
        if self._hash_task is None or self._hash_task.done():
            self._hash_task = asyncio.create_task(self._hash_loop(), name="catalog-hash")

    async def _hash_loop(self) -> None:
        try:
            while not self._stop.is_set() and (todo := self._pending_hashes()):
                key = todo[0]
                digest = await asyncio.to_thread(_sha256_file, key, self._stop)
                if digest is None:
                    self._hash_failed.add(key)
                else:
                    self._hashes[key] = digest
                self._apply_hashes()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("model catalog: hashing failed")

    def missing_files(self, config: ModelConfig) -> tuple[str, ...]:
        """Component keys whose file was absent at the last refresh."""
        missing = []
        for key, path in config.components.items():
            state = self._probes[path] if path in self._probes else _probe(path)
            if state is None:
                missing.append(key)
        return tuple(missing)

    # ---- lookup ---------------------------------------------------------------------------

    @property
    def errors(self) -> dict[str, str]:
        """File name -> why it is not served (malformed, or an ID clash)."""
        out = {n: e.error for n, e in self._entries.items() if e.error is not None}
        out.update(self._collisions)
        if self._dir_error is not None:
            out["."] = self._dir_error
        return dict(sorted(out.items()))

    def _lookup(self, model_id: str) -> ModelConfig | None:
        name = self._by_id.get(model_id)
        return self._entries[name].config if name is not None else None

    def resolve(self, model_id: str) -> ModelConfig | None:
        """The config a text ID, image ID or config ID names; None when unknown or disabled."""
        if self.is_disabled(model_id):
            return None
        return self._lookup(model_id)

    def own_file(self, model_id: str) -> ModelConfig | None:
        """The config of `model_id` even when disabled here: a vLLM follower runs this node's
        file of a gang's model, which the node may keep out of its own list (docs/cluster.md,
        "vLLM multi-node")."""
        return self._lookup(model_id)

    def require(self, model_id: object) -> ModelConfig:
        """The config a request's `model` names: 400 when it is no name, 404 when unknown."""
        if not isinstance(model_id, str) or not model_id:
            raise BadRequest('"model" must be a non-empty string', param="model")
        config = self.resolve(model_id)
        if config is None:
            raise ModelNotFound(model_id)
        return config

    def all_configs(self) -> list[ModelConfig]:
        """Every servable config (disabled ones included), in file-name order."""
        names = sorted(set(self._by_id.values()))
        return [c for c in (self._entries[n].config for n in names) if c is not None]

    def configs(self) -> list[ModelConfig]:
        return [c for c in self.all_configs() if not self._config_disabled(c)]

    def text_ids(self) -> list[str]:
        """IDs selectable by file stem: every enabled config with a lane besides image."""
        return [c.id for c in self.configs() if c.lanes - {Lane.IMAGE}]

    def image_ids(self, active_config_ids: Iterable[str]) -> list[str]:
        """Image IDs to advertise now (see docs/kcpps.md, "Availability")."""
        active = set(active_config_ids)
        out = []
        for config in self.configs():
            if config.image_id is None or config.image_id in self._disabled:
                continue
            image_only = config.lanes == {Lane.IMAGE}
            split = config.backend_mode is not BackendMode.KOBOLD
            if image_only or split or config.id in active:
                out.append(config.image_id)
        return sorted(out)

    # ---- disabled state -------------------------------------------------------------------

    def _config_disabled(self, config: ModelConfig) -> bool:
        # An image-only config's image ID is its only public name, so it stands for the config.
        if config.id in self._disabled:
            return True
        return config.lanes == {Lane.IMAGE} and config.image_id in self._disabled

    def is_disabled(self, model_id: str) -> bool:
        if model_id in self._disabled:
            return True
        config = self._lookup(model_id)
        return config is not None and self._config_disabled(config)

    def disabled_ids(self) -> frozenset[str]:
        return frozenset(self._disabled)

    def load_disabled(self, ids: Iterable[str]) -> None:
        """Restore persisted state; unknown IDs are kept so a file added later stays disabled."""
        self._disabled = set(ids)

    async def set_disabled(self, model_id: str, disabled: bool) -> bool:
        """Disable or enable one ID; returns whether anything changed. KeyError: unknown ID."""
        if disabled and model_id not in self._by_id:
            raise KeyError(model_id)
        if disabled == (model_id in self._disabled):
            return False
        if disabled:
            self._disabled.add(model_id)
        else:
            self._disabled.discard(model_id)
        if self.on_state_change is not None:
            await self.on_state_change(model_id, disabled)
        return True


# ---- worker-thread helpers (blocking I/O) -----------------------------------------------


def _scan(folder: Path) -> dict[str, tuple[int, int]]:
    """`*.kcpps` regular files one level deep; dotfiles are editor leftovers, not configs."""
    found: dict[str, tuple[int, int]] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.name.endswith(".kcpps"):
                continue
            try:
                if entry.is_file():
                    st = entry.stat()
                    found[entry.name] = (st.st_size, st.st_mtime_ns)
            except OSError:
                continue  # removed between listing and stat
    return found


def _probe(path: Path) -> _FileState | None:
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    return _FileState(real, st.st_size, st.st_mtime_ns, os.path.isfile(real))


def _probe_all(paths: Iterable[Path]) -> dict[Path, _FileState | None]:
    return {p: _probe(p) for p in paths}


def _sha256_file(key: _HashKey, stop: threading.Event) -> str | None:
    """SHA-256 of the file `key` names, or None if it changed, vanished or we were stopped."""
    real, size, mtime_ns = key
    digest = hashlib.sha256()
    try:
        with open(real, "rb") as fh:
            if _stamp(os.fstat(fh.fileno())) != (size, mtime_ns):
                return None
            while chunk := fh.read(_CHUNK):
                if stop.is_set():
                    return None
                digest.update(chunk)
            if _stamp(os.fstat(fh.fileno())) != (size, mtime_ns):
                return None
    except OSError:
        return None
    return digest.hexdigest()


def _stamp(st: os.stat_result) -> tuple[int, int]:
    return (st.st_size, st.st_mtime_ns)
