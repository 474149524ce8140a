"""The conversation library's backend side (docs/swaps.md, "The conversation library").

Before a llama-server runtime stops (swap, eviction, idle unload, the router's shutdown), each
conversation it served that has no current saved state is replayed into slot 0 with no answer
(`n_predict` 0, `cache_prompt`): llama-server moves a state it still holds (in a slot or in its
RAM prompt cache) into the slot and computes only the unmatched tail, or prefills the prompt
when it holds none; then slot 0 is saved to the conversation's own file. Most recently used
first, so the deadline cuts the oldest. A returning conversation whose saved state this
process does not hold yet gets it restored into an idle slot, and the request is pinned there
(`id_slot`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from router.backend_client import BackendClient, BackendFault
from router.config import Settings
from router.conversations import Conversation, Library, SavedState, choose_to_keep, parse
from router.runtime import kvkeys
from router.runtime.kvfiles import commit_slots, intact, remove, seal
from router.runtime.state import Runtime

log = logging.getLogger(__name__)
# Conversations kept per cache key (a model as launched): an agent, a chat window and a
# coding tool with room for their side requests (titles, tags).
BOUND = 16
# What a state costs on disk per token before a save measured it (a small model's figure;
# the first save of a key replaces it).
_BYTES_PER_TOKEN = 512.0
_REPLAY_SLOT = 0


def instance_of(runtime: Runtime) -> str:
    """One launched process of a runtime (its memory is what holds conversations)."""
    return f"{runtime.port}:{runtime.created_at}"


def conv_file(key: str, conv_id: str) -> str:
    return f"{key}-conv{conv_id}.bin"


class Conversations:
    def __init__(self, settings: Settings, client: BackendClient, library: Library) -> None:
        self._settings = settings
        self._client = client
        self.library = library
        self._held: dict[str, str] = {}  # instance -> the conversation it served last
        self._bytes_per_token: dict[str, float] = {}

    # ---- a request on its way to the backend --------------------------------------------

    async def before_forward(
        self, runtime: Runtime, key: str, folder: Path, path: str, body: bytes
    ) -> bytes | None:
        """The body pinned to the slot a saved state was restored into, or None (as it is)."""
        prompt = parse(path, body)
        if prompt is None:
            return None
        instance = instance_of(runtime)
        noted = self.library.note(key, prompt, config=runtime.config.id)
        for name in noted.evicted:
            remove(folder, name)
        conv, state = noted.conversation, noted.restore
        held = self._held.get(instance) == conv.id
        self._held[instance] = conv.id
        self.library.hold(conv, instance)
        if state is None or held:
            return None
        outcome = await self._client.bounded(
            "kv_cache",
            runtime.identity(),
            "restore",
            lambda: self.recall(runtime, key, folder, state),
            self._settings.runtime.kv_restore_timeout,
        )
        if outcome is None or outcome[0] != "ok":
            return None
        data = json.loads(body)
        data["id_slot"] = outcome[1]["slot"]
        return json.dumps(data).encode()

    async def recall(
        self, runtime: Runtime, key: str, folder: Path, state: SavedState
    ) -> tuple[str, dict[str, Any]]:
        """Restore `state` into an idle slot that can hold it; ("ok", slot and tokens)."""
        if not await asyncio.to_thread(intact, folder, state.name):
            remove(folder, state.name)
            self.library.lost(key, state.name)
            raise ValueError(f"KV cache file {state.name} failed its checksum")
        slot, n_ctx = _idle_slot(await self._client.call("GET", runtime.base_url + "/slots"))
        if n_ctx is not None and state.tokens > n_ctx:
            return "too_long", {"tokens": state.tokens, "n_ctx": n_ctx}
        if shares_cells(runtime.argv):
            # A one-token task on the slot first: llama-server then moves idle slots into its
            # RAM cache and clears them, so the restore finds free cells in the shared buffer.
            # Slots with cells of their own skip it: a restore empties its slot first, and the
            # task is a decode on the request path (the bench saw it take up to 1.8 s).
            await self._complete(runtime, {"prompt": "", "id_slot": slot})
        url = f"{runtime.base_url}/slots/{slot}?action=restore"
        result = await self._client.call("POST", url, {"filename": state.name})
        n_restored = result.get("n_restored") if isinstance(result, dict) else None
        if not isinstance(n_restored, int) or n_restored <= 0:
            remove(folder, state.name)
            self.library.lost(key, state.name)
            raise ValueError(f"the backend restored nothing from {state.name}")
        _touch(folder / state.name)
        return "ok", {"slot": slot, "tokens": n_restored, "conversations": 1}

    async def restore_newest(self, runtime: Runtime, key: str, folder: Path) -> tuple[int, int]:
        """At load: the most recently used saved conversation; (conversations, tokens)."""
        conv = self.library.newest_saved(key)
        if conv is None or conv.saved is None:
            return 0, 0
        result, fields = await self.recall(runtime, key, folder, conv.saved)
        if result != "ok":
            return 0, 0
        instance = instance_of(runtime)
        self._held[instance] = conv.id
        self.library.hold(conv, instance)
        return 1, int(fields["tokens"])

    # ---- before a stop ------------------------------------------------------------------

    async def save(
        self, runtime: Runtime, key: str, folder: Path
    ) -> tuple[str, dict[str, Any]] | None:
        """Save what this process holds of the key's conversations within the bounds; None
        when it served none the library could read, or the backend refused every replay
        (the slot save then runs instead)."""
        instance = instance_of(runtime)
        if instance not in self._held:
            return None
        budget = self._settings.runtime.kv_cache_dir_budget
        per_token = self._bytes_per_token.get(key, _BYTES_PER_TOKEN)
        keep = choose_to_keep(self.library.candidates(key, instance), BOUND, budget, per_token)
        saved = tokens = 0
        refused = 0
        for i, conv_id in enumerate(keep):
            conv = self.library.get(key, conv_id)
            n_saved = 0
            if conv is not None and conv.dirty and conv.live == instance:
                try:
                    n_saved = await self._save_one(runtime, key, folder, conv)
                except BackendFault as exc:  # an older server without /apply-template...
                    log.warning("%s: saving a conversation failed: %s", runtime.key, exc)
                    refused += 1
            if _bytes(folder, keep[: i + 1], key) > budget:  # the estimate was low: it goes
                keep = keep[:i]
                break
            saved, tokens = saved + (n_saved > 0), tokens + n_saved
        if refused and not saved:
            return None  # the backend saves no conversation: the slot save instead
        dropped = await asyncio.to_thread(_drop_others, key, folder, set(keep))
        self.library.lost(key, *dropped)
        fields = {"slots": saved, "tokens": tokens, "conversations": saved}
        return ("ok" if saved else "current"), fields

    def stopped(self, runtime: Runtime) -> None:
        instance = instance_of(runtime)
        self._held.pop(instance, None)
        self.library.forget_instance(instance)

    async def _save_one(self, runtime: Runtime, key: str, folder: Path, conv: Conversation) -> int:
        replay = conv.replay or {}
        if conv.kind == "chat":
            rendered = await self._client.call("POST", runtime.base_url + "/apply-template", replay)
            prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
        else:
            prompt = replay.get("prompt")
        if not isinstance(prompt, str):
            return 0
        units, digest = conv.units, conv.digest  # what the replay holds, if the turn moves on
        await self._complete(runtime, {"prompt": prompt, "id_slot": _REPLAY_SLOT})
        name = conv_file(key, conv.id)
        url = f"{runtime.base_url}/slots/{_REPLAY_SLOT}?action=save"
        result = await self._client.call("POST", url, {"filename": name})
        n_saved = result.get("n_saved") if isinstance(result, dict) else None
        if not isinstance(n_saved, int) or n_saved <= 0 or self.library.get(key, conv.id) is None:
            remove(folder, name)  # nothing saved, or its library was erased meanwhile
            return 0
        await asyncio.to_thread(seal, folder, name, n_saved)
        with contextlib.suppress(OSError):
            self._bytes_per_token[key] = (folder / name).stat().st_size / n_saved
        self.library.saved(conv, SavedState(name, units, digest, n_saved))
        return n_saved

    async def _complete(self, runtime: Runtime, body: dict[str, Any]) -> None:
        full = {**body, "n_predict": 0, "cache_prompt": True}
        await self._client.call("POST", runtime.base_url + "/completion", full)


def shares_cells(argv: Sequence[str]) -> bool:
    """Do the runtime's slots share one KV buffer? llama-server's default when it picks the
    slot count itself (no `-np`), or when asked (`--kv-unified`); the router's own launch
    names the slots, so each has its own cells (backends/llamacpp.py)."""
    if "--kv-unified" in argv or "-kvu" in argv:
        return True
    if "--no-kv-unified" in argv or "-no-kvu" in argv:
        return False
    return "-np" not in argv and "--parallel" not in argv


def _drop_others(key: str, folder: Path, keep: set[str]) -> list[str]:
    """A key's files are its kept conversations' only: older slot files and the states of
    conversations past the bounds go (a save replaces what was saved before). The names of
    the conversation states removed."""
    wanted = {conv_file(key, c) for c in keep}
    dropped = []
    for path in folder.glob(f"{key}-*.bin"):
        if path.name in wanted:
            continue
        if kvkeys.parse_slot_file(path.name) is None:
            dropped.append(path.name)
            remove(folder, path.name)
    commit_slots(folder, key, [])  # the slot set goes, with its manifest
    return dropped


def _idle_slot(slots: Any) -> tuple[int, int | None]:
    """(id, n_ctx if told) of the first slot not processing (the first slot when none is
    idle: a restore aimed at a busy slot waits for it)."""
    rows = [s for s in slots if isinstance(s, dict)] if isinstance(slots, list) else []
    idle = [s for s in rows if not s.get("is_processing") and isinstance(s.get("id"), int)]
    chosen = idle[0] if idle else (rows[0] if rows else {"id": 0})
    n_ctx = chosen.get("n_ctx")
    return int(chosen.get("id", 0)), n_ctx if isinstance(n_ctx, int) else None


def _bytes(folder: Path, keep: list[str], key: str) -> int:
    total = 0
    for conv_id in keep:
        with contextlib.suppress(OSError):
            total += (folder / conv_file(key, conv_id)).stat().st_size
    return total


def _touch(path: Path) -> None:
    now = time.time()
    with contextlib.suppress(OSError):
        os.utime(path, (now, now))  # least recently used is judged by mtime
