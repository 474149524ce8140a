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
from router.conversations import Library, SavedState
from router.domain import Family, Lane
from router.errors import BadRequest
from router.runtime import kvkeys, kvlibrary
from router.runtime.hooks import SwapHook
from router.runtime.kvfiles import commit_slots, committed_slots, saved_tokens, seal
from router.runtime.kvfiles import intact as _intact
from router.runtime.kvfiles import remove as _remove
from router.runtime.kvlibrary import Conversations
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
        self.conversations = Conversations(
            settings, client, Library(root / "library.json", kvlibrary.BOUND)
        )

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
        """Drained and about to receive TERM: save its conversations (or, when the library
        read none of its prompts, every slot holding tokens), within the deadline."""
        if self.applies(runtime.spec) and runtime.base_url and self._enabled(runtime):
            await self._bounded("save", runtime, self._save, self._settings.runtime.kv_save_timeout)
        self.conversations.stopped(runtime)

    async def before_forward(self, runtime: Runtime, path: str, body: bytes) -> bytes | None:
        """A whole request body on its way to `runtime`: the library notes its prompt and,
        for a returning conversation, restores its state; the body pinned to that slot, or
        None to send it as it is."""
        if not (self.applies(runtime.spec) and runtime.base_url and self._enabled(runtime)):
            return None
        key, folder = self._key(runtime), self.folder(runtime.spec)
        return await self.conversations.before_forward(runtime, key, folder, path, body)

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

    async def forget(self, config_id: str) -> int:
        """Erase a configuration's conversations: their digests (on the loop, where requests
        note theirs) and their files (off it). A runtime of it stays loaded; it no longer
        knows them, so its next stop saves none of them. The number of saved states erased."""
        names = self.conversations.library.drop_config(config_id)
        await asyncio.to_thread(self._remove_everywhere, names)
        return len(names)

    def _remove_everywhere(self, names: Sequence[str]) -> None:
        for name in names:
            for folder in (p for p in self._root.iterdir() if p.is_dir()):
                _remove(folder, name)

    def probe_result(self, runtime: Runtime) -> dict[str, Any] | None:
        """The stored probe verdict for this runtime's cache key, if any."""
        return self._probes.get(self._key(runtime))

    def saved_conversations(self, config_id: str) -> list[tuple[SavedState, float]]:
        """The library's saved states of a configuration (memory only: read on the loop)."""
        return self.conversations.library.saved_of(config_id)

    def status(
        self, config: ModelConfig, saved: Sequence[tuple[SavedState, float]] = ()
    ) -> dict[str, Any] | None:
        """What the model's detail page shows (blocking: stats files; call off the loop).

        None for a configuration persistence never applies to. `probe` is the stored verdict
        for the key the configuration would launch with now (its argv with any port, so a
        changed model, context or binary shows no verdict until the next load probes it).
        `conversations` sums `saved` (from `saved_conversations`): count, bytes on disk,
        tokens and the last use; never a prompt.
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
        return {
            "mode": mode,
            "enabled": kvkeys.persist_enabled(mode, passed),
            "probe": probe,
            "conversations": _summary(self.folder(spec), saved),
        }

    async def _bounded(self, action: str, runtime: Runtime, work: _Work, deadline: float) -> None:
        await self._client.bounded(
            "kv_cache", runtime.identity(), action, lambda: work(runtime), deadline
        )

    # ---- save ---------------------------------------------------------------------------

    async def _save(self, runtime: Runtime) -> tuple[str, dict[str, Any]]:
        folder = self.folder(runtime.spec)
        key = self._key(runtime)
        outcome = await self.conversations.save(runtime, key, folder)
        if outcome is not None:
            await self._cap_disk(folder, key)
            return outcome
        saved, tokens = await self._save_slots(runtime, key, folder)
        await self._cap_disk(folder, key)
        return ("ok" if saved else "none"), {"slots": saved, "tokens": tokens}

    async def _save_slots(self, runtime: Runtime, key: str, folder: Path) -> tuple[int, int]:
        """Every slot holding tokens, under this save's own names; then the manifest names
        them as the key's set and the earlier set goes (a save replaces, never adds up)."""
        answer = await self._client.call("GET", runtime.base_url + "/slots")
        generation = f"{time.time_ns():x}"
        names: list[str] = []
        tokens = 0
        for slot in kvkeys.slots_to_save(answer):
            name = kvkeys.slot_file(key, slot, generation)
            result = await self._client.call(
                "POST", f"{runtime.base_url}/slots/{slot}?action=save", {"filename": name}
            )
            n_saved = result.get("n_saved") if isinstance(result, dict) else None
            if not isinstance(n_saved, int) or n_saved <= 0:
                _remove(folder, name)
                continue
            await asyncio.to_thread(seal, folder, name, n_saved)
            names.append(name)
            tokens += n_saved
        await asyncio.to_thread(commit_slots, folder, key, names)
        return len(names), tokens

    async def _cap_disk(self, folder: Path, key: str) -> None:
        """The disk cap, off the loop; the library forgets the states it removed."""
        for name in await asyncio.to_thread(self._enforce_budget, folder, key):
            self.conversations.library.lost(name[:32], name)

    def _enforce_budget(self, folder: Path, key: str) -> list[str]:
        entries = []
        for path in self._root.glob("*/*.bin"):
            with contextlib.suppress(OSError):
                stat = path.stat()
                name = f"{path.parent.name}/{path.name}"
                entries.append(kvkeys.CacheEntry(name, stat.st_size, stat.st_mtime))
        keep = frozenset(f"{folder.name}/{p.name}" for p in folder.glob(f"{key}-*.bin"))
        removed = []
        for name in kvkeys.over_budget(entries, self._settings.runtime.kv_cache_dir_budget, keep):
            sub, file_name = name.split("/", 1)
            log.info("KV cache budget: removing %s", name)
            _remove(self._root / sub, file_name)
            removed.append(file_name)
        return removed

    # ---- restore ------------------------------------------------------------------------

    async def _restore(self, runtime: Runtime) -> tuple[str, dict[str, Any]]:
        folder = self.folder(runtime.spec)
        key = self._key(runtime)
        restored = tokens = 0
        names = await asyncio.to_thread(committed_slots, folder, key)
        contexts = kvkeys.slot_contexts(
            await self._client.call("GET", runtime.base_url + "/slots") if names else []
        )
        try:
            for name in names:
                n_restored = await self._restore_slot(runtime, folder, name, contexts)
                restored, tokens = restored + (n_restored > 0), tokens + n_restored
        finally:  # a file removed on the way leaves the set
            kept = [n for n in names if (folder / n).exists()]
            if kept != names:
                await asyncio.to_thread(commit_slots, folder, key, kept)
        conversations, more = await self.conversations.restore_newest(runtime, key, folder)
        restored, tokens = restored + conversations, tokens + more
        return ("ok" if restored else "none"), {"slots": restored, "tokens": tokens}

    async def _restore_slot(
        self, runtime: Runtime, folder: Path, name: str, contexts: dict[int, int | None]
    ) -> int:
        """One file of the key's set into its slot, if intact and it fits; tokens restored."""
        parsed = kvkeys.parse_slot_file(name)
        if parsed is None or not (folder / name).exists():
            return 0
        if not await asyncio.to_thread(_intact, folder, name):
            log.warning("%s: KV cache file %s is damaged; removed", runtime.key, name)
            _remove(folder, name)
            raise ValueError(f"KV cache file {name} failed its checksum")
        if not kvkeys.fits_slot(parsed[1], saved_tokens(folder, name), contexts):
            log.warning("%s: KV cache file %s does not fit its slot; removed", runtime.key, name)
            _remove(folder, name)
            return 0
        url = f"{runtime.base_url}/slots/{parsed[1]}?action=restore"
        result = await self._client.call("POST", url, {"filename": name})
        n_restored = result.get("n_restored") if isinstance(result, dict) else None
        if not isinstance(n_restored, int) or n_restored <= 0:
            _remove(folder, name)
            raise ValueError(f"the backend restored nothing from {name}")
        now = time.time()
        with contextlib.suppress(OSError):
            os.utime(folder / name, (now, now))  # least recently used is judged by mtime
        return n_restored

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


def _summary(folder: Path, saved: Sequence[tuple[SavedState, float]]) -> dict[str, Any]:
    size = 0
    for state, _ in saved:
        with contextlib.suppress(OSError):
            size += (folder / state.name).stat().st_size
    return {
        "count": len(saved),
        "bytes": size,
        "tokens": sum(state.tokens for state, _ in saved),
        "last_used": max((used for _, used in saved), default=None),
    }


def _identity(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (-1, -1)
    return (stat.st_size, stat.st_mtime_ns)
