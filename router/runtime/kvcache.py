"""KV caches that survive swaps: llama-server slot save before a stop, restore after a load.

The router calls the backend's own `/slots` routes on the backend port (clients never reach
them). Each save or restore is bounded by its deadline (`runtime.kv_save_timeout`,
`runtime.kv_restore_timeout`) by the backend client (router/backend_client), which logs a
failure or timeout and publishes it as a `kv_cache` event (counted in Prometheus); it never
fails a request. Files live in one folder per runtime
under the state folder; a JSON sidecar per file records its SHA-256, so a file damaged on disk
is deleted instead of restored. Disk use is capped by `runtime.kv_cache_dir_budget`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from backends.base import BackendError
from backends.registry import adapter_for
from router.backend_client import BackendClient, BackendFault, Outcome
from router.config import ModelConfig, Settings
from router.domain import Family, Lane
from router.errors import BadRequest
from router.runtime import kvkeys
from router.runtime.hooks import SwapHook
from router.runtime.kvprobe import ProbeResults, run_probe
from router.runtime.loader import Launched, LaunchSpec
from router.runtime.state import Runtime, spec_for
from router.tracing import Span, tracer

log = logging.getLogger(__name__)
_Work = Callable[[Runtime], Awaitable[Outcome]]


class KvCaches(SwapHook):
    def __init__(self, settings: Settings, client: BackendClient, root: Path) -> None:
        self._settings = settings
        self._client = client
        self._root = root
        self._probes = ProbeResults(root / "probes.json")

    # ---- which runtimes take part -------------------------------------------------------

    def applies(self, spec: LaunchSpec) -> bool:
        """May persist (`on`, or `auto` pending its probe): launched with a save folder."""
        return (
            spec.family is Family.LLAMACPP
            and spec.lane is Lane.TEXT
            and spec.config.kv_persist != "off"
        )

    def _enabled(self, runtime: Runtime) -> bool:
        probe = self._probes.get(self._key(runtime))
        passed = bool(probe["passed"]) if probe is not None else None
        return kvkeys.persist_enabled(runtime.config.kv_persist, passed)

    def folder(self, spec: LaunchSpec) -> Path:
        return self._root / spec.key.replace("/", "_").replace("@", "_")

    def launch_args(self, spec: LaunchSpec) -> list[str]:
        """`--slot-save-path` for a runtime that persists (the folder must exist first)."""
        if not self.applies(spec):
            return []
        folder = self.folder(spec)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return ["--slot-save-path", str(folder)]

    # ---- the hooks the lifecycle calls --------------------------------------------------

    async def save(self, runtime: Runtime) -> None:
        """Drained and about to receive TERM: save every slot holding tokens, within the deadline."""
        if self.applies(runtime.spec) and runtime.base_url and self._enabled(runtime):
            await self._bounded("save", runtime, self._save, self._settings.runtime.kv_save_timeout)

    async def restore(self, runtime: Runtime) -> None:
        """Loaded, not yet READY: probe an `auto` model not judged yet (kvprobe.py), then
        restore the slots saved under this very key. Each step has the restore deadline."""
        if not (self.applies(runtime.spec) and runtime.base_url):
            return
        timeout = self._settings.runtime.kv_restore_timeout
        if runtime.config.kv_persist == "auto" and self._probes.get(self._key(runtime)) is None:
            await self._bounded("probe", runtime, self._probe, timeout)
        if self._enabled(runtime):
            attributes = {"tensor_router.model": runtime.config.id}
            with tracer().span("kv restore", attributes=attributes) as span:
                await self._bounded("restore", runtime, _spanned(span, self._restore), timeout)

    # ---- the swap hook (router/runtime/hooks.py) ------------------------------------------

    async def after_ready(
        self, runtime: Runtime, launched: Launched, report: Sequence[str]
    ) -> None:
        await self.restore(runtime)

    async def before_stop(self, runtime: Runtime) -> None:
        await self.save(runtime)

    def probe_result(self, runtime: Runtime) -> dict[str, Any] | None:
        """The stored probe verdict for this runtime's cache key, if any."""
        return self._probes.get(self._key(runtime))

    def status(self, config: ModelConfig) -> dict[str, Any] | None:
        """What the model's detail page shows (blocking: stats files; call off the loop).

        None for a configuration persistence never applies to. `probe` is the stored verdict
        for the key the configuration would launch with now (its argv with any port, so a
        changed model, context or binary shows no verdict until the next load probes it).
        """
        try:
            spec = spec_for(config, Lane.TEXT)
        except BadRequest:
            return None
        if spec.family is not Family.LLAMACPP:
            return None
        mode = config.kv_persist
        probe = None
        if mode == "auto":
            try:
                argv = adapter_for(spec.family).argv(config, Lane.TEXT, 0, self._settings)
            except (BackendError, OSError):
                argv = None  # no binary, or it cannot launch: nothing was probed for it
            if argv is not None:
                probe = self._probes.get(self._key_for(config, argv))
        passed = bool(probe["passed"]) if probe is not None else None
        return {"mode": mode, "enabled": kvkeys.persist_enabled(mode, passed), "probe": probe}

    async def _bounded(self, action: str, runtime: Runtime, work: _Work, deadline: float) -> None:
        await self._client.bounded(
            "kv_cache", runtime.identity(), action, lambda: work(runtime), deadline
        )

    # ---- save ---------------------------------------------------------------------------

    async def _save(self, runtime: Runtime) -> tuple[str, dict[str, Any]]:
        folder = self.folder(runtime.spec)
        key = self._key(runtime)
        answer = await self._client.call("GET", runtime.base_url + "/slots")
        saved = tokens = 0
        for slot in kvkeys.slots_to_save(answer):
            name = kvkeys.slot_file(key, slot)
            body = {"filename": name}
            result = await self._client.call(
                "POST", f"{runtime.base_url}/slots/{slot}?action=save", body
            )
            n_saved = result.get("n_saved") if isinstance(result, dict) else None
            if not isinstance(n_saved, int) or n_saved <= 0:
                _remove(folder, name)
                continue
            digest = await asyncio.to_thread(_sha256, folder / name)
            _write_sidecar(folder, name, {"sha256": digest, "n_saved": n_saved})
            saved += 1
            tokens += n_saved
        await asyncio.to_thread(self._enforce_budget, folder, key)
        return ("ok" if saved else "none"), {"slots": saved, "tokens": tokens}

    def _enforce_budget(self, folder: Path, key: str) -> None:
        entries = []
        for path in self._root.glob("*/*.bin"):
            with contextlib.suppress(OSError):
                stat = path.stat()
                name = f"{path.parent.name}/{path.name}"
                entries.append(kvkeys.CacheEntry(name, stat.st_size, stat.st_mtime))
        keep = frozenset(f"{folder.name}/{p.name}" for p in folder.glob(f"{key}-slot*.bin"))
        for name in kvkeys.over_budget(entries, self._settings.runtime.kv_cache_dir_budget, keep):
            sub, file_name = name.split("/", 1)
            log.info("KV cache budget: removing %s", name)
            _remove(self._root / sub, file_name)

    # ---- restore ------------------------------------------------------------------------

    async def _restore(self, runtime: Runtime) -> tuple[str, dict[str, Any]]:
        folder = self.folder(runtime.spec)
        key = self._key(runtime)
        restored = tokens = 0
        for path in sorted(folder.glob(f"{key}-slot*.bin")):
            parsed = kvkeys.parse_slot_file(path.name)
            if parsed is None:
                continue
            if not await asyncio.to_thread(_intact, folder, path.name):
                log.warning("%s: KV cache file %s is damaged; removed", runtime.key, path.name)
                _remove(folder, path.name)
                raise ValueError(f"KV cache file {path.name} failed its checksum")
            body = {"filename": path.name}
            url = f"{runtime.base_url}/slots/{parsed[1]}?action=restore"
            result = await self._client.call("POST", url, body)
            n_restored = result.get("n_restored") if isinstance(result, dict) else None
            if not isinstance(n_restored, int) or n_restored <= 0:
                _remove(folder, path.name)
                raise ValueError(f"the backend restored nothing from {path.name}")
            now = time.time()
            with contextlib.suppress(OSError):
                os.utime(path, (now, now))  # least recently used is judged by mtime
            restored += 1
            tokens += n_restored
        return ("ok" if restored else "none"), {"slots": restored, "tokens": tokens}

    # ---- probe --------------------------------------------------------------------------

    async def _probe(self, runtime: Runtime) -> tuple[str, dict[str, Any]]:
        key = self._key(runtime)
        try:
            found = await run_probe(self._client.call, runtime.base_url, key)
        except (BackendFault, ValueError) as exc:
            # A backend that cannot do it now will not later either: stored, not retried until
            # the key changes. A timeout is not stored (a busy machine may do better next time).
            self._probes.put(key, {"passed": False, "error": str(exc)[:200], "at": time.time()})
            raise
        finally:
            _remove(self.folder(runtime.spec), f"probe-{key}.bin")
        self._probes.put(key, found)
        fields = {k: found[k] for k in ("prompt_tokens", "cached_tokens", "same_answer")}
        return ("passed" if found["passed"] else "rejected"), fields

    # ---- helpers ------------------------------------------------------------------------

    def _key(self, runtime: Runtime) -> str:
        return self._key_for(runtime.config, runtime.argv)

    @staticmethod
    def _key_for(config: ModelConfig, argv: list[str]) -> str:
        paths = [str(p) for p in config.components.values()]
        if argv:
            paths.append(argv[0])
        files = {p: _identity(Path(p)) for p in paths}
        return kvkeys.cache_key(config.config_sha256, argv, files)


def _spanned(span: Span, work: _Work) -> _Work:
    """`work`, its outcome on `span` (the client logs and counts a failure; the span shows it)."""

    async def run(runtime: Runtime) -> Outcome:
        try:
            outcome = await work(runtime)
        except BaseException as exc:  # a timeout cancels it
            span.fail(type(exc).__name__, str(exc) or None)
            raise
        status, figures = outcome
        span.set("tensor_router.kv.result", status)
        span.set("tensor_router.kv.slots", figures.get("slots"))
        span.set("tensor_router.kv.tokens", figures.get("tokens"))
        return outcome

    return run


def _identity(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (-1, -1)
    return (stat.st_size, stat.st_mtime_ns)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _sidecar(folder: Path, name: str) -> Path:
    return folder / (name.removesuffix(".bin") + ".json")


def _write_sidecar(folder: Path, name: str, data: dict[str, Any]) -> None:
    target = _sidecar(folder, name)
    partial = target.with_suffix(".json.partial")
    partial.write_text(json.dumps(data))
    partial.replace(target)  # atomic: a sidecar is whole or absent


def _intact(folder: Path, name: str) -> bool:
    try:
        meta = json.loads(_sidecar(folder, name).read_text())
        return isinstance(meta, dict) and meta.get("sha256") == _sha256(folder / name)
    except (OSError, ValueError):
        return False


def _remove(folder: Path, name: str) -> None:
    for path in (folder / name, _sidecar(folder, name)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
