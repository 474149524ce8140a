"""The conversation library's memory (docs/swaps.md, "The conversation library"): which
conversations each cache key has seen, which runtime holds them, and which have a saved state.

Per cache key (router/runtime/kvkeys.py: model, launch and binary), at most `bound`
conversations are kept, least recently used dropped first. A conversation's prompt (what a
replay sends) is held in memory only; the index file keeps digests, token counts and file
names, owner-only, so a restarted router finds saved states without any prompt text on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from router.conversations.prefix import Candidate, Prompt, matches

# Prefixes reported per configuration: its conversations' current and saved ones, newest first.
MAX_REPORTED = 64


@dataclass(frozen=True)
class SavedState:
    """A slot file that holds a conversation's prompt state up to `units` units."""

    name: str
    units: int
    digest: str
    tokens: int


@dataclass
class Conversation:
    id: str
    key: str
    kind: str
    units: int
    digest: str
    last_used: float
    replay: dict[str, Any] | None = None  # in memory only; None after a restart
    live: str | None = None  # the runtime instance whose process holds it
    saved: SavedState | None = None
    tokens: int = field(default=0)
    config: str = ""  # the configuration's id (what a cluster node reports it under)

    @property
    def dirty(self) -> bool:
        """Held by a runtime and newer than its saved state (a replay can save it)."""
        current = self.saved is not None and self.saved.digest == self.digest
        return self.replay is not None and self.live is not None and not current


@dataclass(frozen=True)
class Noted:
    conversation: Conversation
    restore: SavedState | None  # a saved state to load before forwarding
    evicted: tuple[str, ...]  # file names of conversations the bound dropped


class Library:
    def __init__(self, index: Path, bound: int) -> None:
        self._index = index
        self._bound = bound
        self._by_key: dict[str, dict[str, Conversation]] = {}
        self._load()

    def note(self, key: str, prompt: Prompt, now: float | None = None, config: str = "") -> Noted:
        """A prompt on its way to a runtime of `key`: its conversation (found by the longest
        match, or new) now ends at this prompt; its saved state, if the prompt extends it, is
        returned (the caller knows whether the runtime holds it already)."""
        now = time.time() if now is None else now
        convs = self._by_key.setdefault(key, {})
        found = _best(convs.values(), prompt.chain)
        evicted: tuple[str, ...] = ()
        if found is None:
            found = Conversation(secrets.token_hex(8), key, prompt.kind, 0, "", now, config=config)
            convs[found.id] = found
            evicted = self._evict(key)
        restore = found.saved
        if restore is not None and not matches(prompt.chain, restore.units, restore.digest):
            restore = None
        found.units, found.digest = len(prompt.chain), prompt.chain[-1]
        found.replay, found.last_used = prompt.replay, now
        found.tokens = max(found.tokens, _estimate(prompt))
        return Noted(found, restore, evicted)

    def hold(self, conversation: Conversation, instance: str) -> None:
        conversation.live = instance

    def candidates(self, key: str, instance: str) -> list[Candidate]:
        """The key's conversations that have a saved state or that `instance` can save now."""
        return [
            Candidate(c.id, c.last_used, c.tokens)
            for c in self._by_key.get(key, {}).values()
            if c.saved is not None or (c.dirty and c.live == instance)
        ]

    def get(self, key: str, conv_id: str) -> Conversation | None:
        return self._by_key.get(key, {}).get(conv_id)

    def saved(self, conversation: Conversation, state: SavedState) -> None:
        conversation.saved = state
        conversation.tokens = state.tokens
        self.persist()

    def lost(self, key: str, *names: str) -> None:
        """These files are gone (damaged, refused, over the cap): forget those states."""
        if not names:
            return
        for conv in self._by_key.get(key, {}).values():
            if conv.saved is not None and conv.saved.name in names:
                conv.saved = None
        self.persist()

    def forget_instance(self, instance: str) -> None:
        """That runtime stopped: nothing is held in its memory any more."""
        for convs in self._by_key.values():
            for conv in convs.values():
                if conv.live == instance:
                    conv.live = None

    def newest_saved(self, key: str) -> Conversation | None:
        saved = [c for c in self._by_key.get(key, {}).values() if c.saved is not None]
        return max(saved, key=lambda c: (c.last_used, c.id), default=None)

    def files(self, key: str) -> set[str]:
        return {c.saved.name for c in self._by_key.get(key, {}).values() if c.saved}

    def saved_of(self, config: str) -> list[tuple[SavedState, float]]:
        """A configuration's saved states with when each conversation was last used."""
        return [
            (c.saved, c.last_used)
            for convs in self._by_key.values()
            for c in convs.values()
            if c.config == config and c.saved is not None
        ]

    def drop_config(self, config: str) -> list[str]:
        """Erase a configuration's conversations; their files' names, for the caller to delete."""
        names: list[str] = []
        for convs in self._by_key.values():
            for conv in [c for c in convs.values() if c.config == config]:
                if conv.saved is not None:
                    names.append(conv.saved.name)
                del convs[conv.id]
        self.persist()
        return names

    def prefixes(self) -> dict[str, tuple[str, ...]]:
        """Per configuration, the prefixes its runtimes hold or saved, as `<units>:<digest>`
        (what a cluster node reports, so a returning conversation is placed where it is)."""
        found: dict[str, list[str]] = {}
        for convs in self._by_key.values():
            for conv in sorted(convs.values(), key=lambda c: -c.last_used):
                rows = found.setdefault(conv.config, [])
                if conv.live is not None:
                    rows.append(f"{conv.units}:{conv.digest}")
                if conv.saved is not None:
                    rows.append(f"{conv.saved.units}:{conv.saved.digest}")
        return {config: tuple(rows[:MAX_REPORTED]) for config, rows in found.items() if config}

    # ---- bounds and the index -----------------------------------------------------------

    def _evict(self, key: str) -> tuple[str, ...]:
        convs = self._by_key[key]
        gone: list[str] = []
        while len(convs) > self._bound:
            oldest = min(convs.values(), key=lambda c: (c.last_used, c.id))
            del convs[oldest.id]
            if oldest.saved is not None:
                gone.append(oldest.saved.name)
        if gone:
            self.persist()
        return tuple(gone)

    def persist(self) -> None:
        """Write the index (digests, token counts, file names; never text), owner-only."""
        rows = [
            {
                "id": c.id,
                "key": c.key,
                "config": c.config,
                "kind": c.kind,
                "last_used": c.last_used,
                **asdict(c.saved),
            }
            for convs in self._by_key.values()
            for c in convs.values()
            if c.saved is not None
        ]
        self._index.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = self._index.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"version": 1, "conversations": rows}, handle)
        partial.replace(self._index)

    def _load(self) -> None:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            rows = json.loads(self._index.read_text())["conversations"]
            for row in rows:
                state = SavedState(
                    str(row["name"]), int(row["units"]), str(row["digest"]), int(row["tokens"])
                )
                conv = Conversation(
                    str(row["id"]),
                    str(row["key"]),
                    str(row["kind"]),
                    state.units,
                    state.digest,
                    float(row["last_used"]),
                    saved=state,
                    tokens=state.tokens,
                    config=str(row.get("config", "")),
                )
                self._by_key.setdefault(conv.key, {})[conv.id] = conv


def _best(convs: Iterable[Conversation], chain: tuple[str, ...]) -> Conversation | None:
    """The conversation whose current or saved prefix matches the longest part of `chain`."""
    best: Conversation | None = None
    length = 0
    for conv in convs:
        here = conv.units if matches(chain, conv.units, conv.digest) else 0
        if conv.saved is not None and matches(chain, conv.saved.units, conv.saved.digest):
            here = max(here, conv.saved.units)
        if here > length or (here == length and here and best and conv.last_used > best.last_used):
            best, length = conv, here
    return best


def _estimate(prompt: Prompt) -> int:
    """A rough token count before any save measured it (about 3 characters a token)."""
    return len(json.dumps(prompt.replay)) // 3
