"""Pure decisions for KV cache persistence (docs/swaps.md, "KV persistence"): no I/O here.

A saved slot is named `<key>-slot<N>.bin`, with `<key>` a digest of everything that decides
whether the saved state is still valid: the `.kcpps` file's hash, each model file's identity,
the backend binary's identity and the launch arguments (context size, parallel slots, KV cache
types...). A changed model, context or binary gives a new key, so stale state is never restored.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

KvPersist = Literal["on", "off", "auto"]
# Arguments whose values change on every launch without changing what a saved cache means.
_VOLATILE_FLAGS = frozenset({"--port", "--slot-save-path"})
# A slot save's files carry the save's generation (`-g<hex>`), so a save never overwrites the
# set it replaces: a manifest names the current set (kvfiles.commit_slots, docs/swaps.md).
_FILE_NAME = re.compile(
    r"^(?P<key>[0-9a-f]{32})(?:-g(?P<gen>[0-9a-f]{1,16}))?-slot(?P<slot>\d{1,4})\.bin$"
)


def persist_enabled(mode: KvPersist, probe_passed: bool | None) -> bool:
    """`on` and `off` decide alone; `auto` follows the stored probe (None: not probed yet)."""
    return mode == "on" or (mode == "auto" and probe_passed is True)


def cache_key(
    config_sha256: str,
    argv: Sequence[str],
    files: Mapping[str, tuple[int, int]],
) -> str:
    """Digest of the config hash, the argv without volatile values, and (size, mtime_ns) of
    each file the launch reads (model files, the binary). 32 hex digits."""
    stable: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in _VOLATILE_FLAGS:
            skip = True
            continue
        stable.append(arg)
    shape = {"config": config_sha256, "argv": stable, "files": sorted(files.items())}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:32]


def slot_file(key: str, slot: int, generation: str = "") -> str:
    return f"{key}-g{generation}-slot{slot}.bin" if generation else f"{key}-slot{slot}.bin"


def parse_slot_file(name: str) -> tuple[str, int] | None:
    match = _FILE_NAME.match(name)
    return (match["key"], int(match["slot"])) if match else None


def slots_to_save(slots: Any) -> list[int]:
    """Slot IDs from a `GET /slots` answer that hold a prompt (hence cached tokens).

    llama-server lists an unused slot with only id/n_ctx/is_processing; a used one also has
    `n_prompt_tokens`. The save's own `n_saved` is the final word (0: the file is dropped).
    """
    if not isinstance(slots, list):
        return []
    found = []
    for slot in slots:
        if not isinstance(slot, dict) or not isinstance(slot.get("id"), int):
            continue
        tokens = slot.get("n_prompt_tokens")
        if isinstance(tokens, int) and tokens > 0 and not slot.get("is_processing"):
            found.append(slot["id"])
    return sorted(found)


def slot_contexts(slots: Any) -> dict[int, int | None]:
    """Each slot's context (`n_ctx`, None when not told) from a `GET /slots` answer."""
    rows = slots if isinstance(slots, list) else []
    found: dict[int, int | None] = {}
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("id"), int):
            n_ctx = row.get("n_ctx")
            found[row["id"]] = n_ctx if isinstance(n_ctx, int) else None
    return found


def fits_slot(slot: int, tokens: int | None, contexts: Mapping[int, int | None]) -> bool:
    """A saved slot state goes back only into a slot the runtime has and whose context holds
    its tokens (a state larger than the context fails inside llama-server). Not told: tried."""
    if not contexts:
        return True
    if slot not in contexts:
        return False
    n_ctx = contexts[slot]
    return n_ctx is None or tokens is None or tokens <= n_ctx


@dataclass(frozen=True)
class CacheEntry:
    name: str  # file name in its folder (the folder is part of the name for uniqueness)
    size: int
    last_used: float  # when it was last saved or restored


def over_budget(entries: Iterable[CacheEntry], budget: int, keep: frozenset[str]) -> list[str]:
    """Names to delete, least recently used first, until the rest fit in `budget` bytes.

    Entries in `keep` (just written) are deleted last and only if they alone exceed the
    budget. Ties on `last_used` break by name so the choice is deterministic.
    """
    ordered = sorted(entries, key=lambda e: (e.name in keep, e.last_used, e.name))
    total = sum(e.size for e in ordered)
    doomed: list[str] = []
    for entry in ordered:
        if total <= budget:
            break
        doomed.append(entry.name)
        total -= entry.size
    return doomed
