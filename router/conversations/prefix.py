"""Pure decisions of the conversation library (docs/swaps.md, "The conversation library").

A prompt is read as a chain of units: for a chat request, one unit of what shapes the rendered
template (tools, template kwargs) and then one per message; for a completion prompt, fixed
blocks of characters. Each unit's digest covers every unit before it, so digest number `n`
stands for the whole first `n` units: a saved conversation matches a new prompt exactly when
the prompt's digest at the saved length is the saved digest. An edited earlier message changes
every digest from it on, so it can only match a state saved before the edit. No text is kept
here, only digests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

CHAT_PATHS = frozenset({"/v1/chat/completions"})
COMPLETION_PATHS = frozenset({"/completion", "/completions", "/v1/completions"})
# Characters per unit of a completion prompt: a saved completion matches at its last whole
# block, and the backend's own prefix match takes the rest.
BLOCK = 256
# Fields of a chat request that change the rendered prompt besides the messages.
_RENDER_FIELDS = ("tools", "chat_template_kwargs")


@dataclass(frozen=True)
class Prompt:
    """A parsed prompt: its kind, the digest chain, and what a replay sends (held in memory)."""

    kind: str  # "chat" or "completion"
    chain: tuple[str, ...]
    replay: dict[str, Any]


def parse(path: str, body: bytes) -> Prompt | None:
    """The prompt of a forwarded request, or None when the library does not take part
    (another route, not JSON, images or token arrays, nothing to match on)."""
    if path not in CHAT_PATHS and path not in COMPLETION_PATHS:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    return _chat(data) if path in CHAT_PATHS else _completion(data)


def _chat(data: dict[str, Any]) -> Prompt | None:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages or not all(map(_text_only, messages)):
        return None
    render = {k: data[k] for k in _RENDER_FIELDS if k in data}
    units = [_canonical({"chat": render}), *(_canonical(m) for m in messages)]
    return Prompt("chat", chain_of(units), {"messages": messages, **render})


def _completion(data: dict[str, Any]) -> Prompt | None:
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or len(prompt) < BLOCK:
        return None
    whole = len(prompt) // BLOCK
    units = ["completion", *(prompt[i * BLOCK : (i + 1) * BLOCK] for i in range(whole))]
    return Prompt("completion", chain_of(units), {"prompt": prompt})


def _text_only(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" for part in content
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def chain_of(units: Iterable[str]) -> tuple[str, ...]:
    """Digest `i` covers units 0..i (a SHA-256 chain, 32 hex digits each)."""
    chain: list[str] = []
    previous = ""
    for unit in units:
        previous = hashlib.sha256((previous + "\0" + unit).encode()).hexdigest()[:32]
        chain.append(previous)
    return tuple(chain)


def matches(chain: Sequence[str], units: int, digest: str) -> bool:
    """Does a prompt with this chain extend (or equal) the prefix of `units` units `digest`?"""
    return 0 < units <= len(chain) and chain[units - 1] == digest


def held_length(chain: Sequence[str], prefixes: Iterable[str]) -> int:
    """The longest of `prefixes` (`<units>:<digest>`, as nodes report them) that the prompt
    with this chain extends, in units; 0 for none (an unreadable entry matches nothing)."""
    best = 0
    for entry in prefixes:
        units, _, digest = entry.partition(":")
        if units.isdigit() and int(units) > best and matches(chain, int(units), digest):
            best = int(units)
    return best


@dataclass(frozen=True)
class Candidate:
    """A conversation that has or may get a saved state: its id, when it was last used and
    the tokens its file holds or will hold (measured by the last save, else estimated)."""

    id: str
    last_used: float
    tokens: int


def choose_to_keep(
    candidates: Iterable[Candidate], count: int, budget: int, bytes_per_token: float
) -> list[str]:
    """Which conversations keep a saved state, most recently used first: at most `count`, and
    their files within `budget` bytes at `bytes_per_token`. A conversation that does not fit is
    passed over, and a later, smaller one may still fit. The caller saves the dirty ones among
    them and deletes the files of the others."""
    ordered = sorted(candidates, key=lambda c: (-c.last_used, c.id))
    kept: list[str] = []
    used = 0
    for cand in ordered:
        if len(kept) >= count:
            break
        size = int(cand.tokens * bytes_per_token)
        if used + size > budget:
            continue
        used += size
        kept.append(cand.id)
    return kept
