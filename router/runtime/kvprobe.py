"""The probe behind `router_kv_persist: auto`: does a restored KV cache really work here?

Right after a load (before the first request), inside the fresh process: answer a fixed prompt
greedily on slot 0, save the slot, erase it, restore it, and answer the same prompt again. The
model passes when the second answer reports (nearly) the whole prompt as cached and is the same
greedy answer. Some hybrid and sliding-window models restore wrong state in some llama.cpp
versions (shared/notes/swap-path.md section 3); they fail here and keep persistence off. The
verdict is stored per cache key (model files, binary, context...), so it is re-run only when
one of them changes.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

PROMPT = " ".join(
    f"Probe line {i}: the router checks that a saved cache comes back." for i in range(8)
)
Call = Callable[[str, str, dict[str, Any] | None], Awaitable[Any]]


def verdict(prompt_tokens: int, cached: int, before: str, after: str) -> bool:
    """Pure: reuse of at least 90 % of the prompt, and the same greedy answer."""
    return prompt_tokens > 0 and cached >= 0.9 * prompt_tokens and before == after


async def run_probe(call: Call, base_url: str, key: str) -> dict[str, Any]:
    """The probe's finding; raises (ValueError, `BackendFault`) when the backend misbehaves."""
    body = {
        "prompt": PROMPT,
        "n_predict": 8,
        "temperature": 0,
        "seed": 1,
        "id_slot": 0,
        "cache_prompt": True,
    }
    # A backend without slot actions fails here, before the probe spends a generation (which a
    # fragile backend may not survive) on a model whose cache could never be saved anyway.
    await call("POST", base_url + "/slots/0?action=erase", None)
    first = await call("POST", base_url + "/completion", body)
    name = f"probe-{key}.bin"
    await call("POST", base_url + "/slots/0?action=save", {"filename": name})
    await call("POST", base_url + "/slots/0?action=erase", None)
    restored = await call("POST", base_url + "/slots/0?action=restore", {"filename": name})
    if _int(restored.get("n_restored")) <= 0:
        raise ValueError("the probe's restore restored nothing")
    second = await call("POST", base_url + "/completion", body)
    with contextlib.suppress(Exception):
        await call("POST", base_url + "/slots/0?action=erase", None)
    prompt_tokens = _int(first.get("timings", {}).get("prompt_n"))
    # The first answer processed the whole prompt (a fresh process); what the second did not
    # process came from the restored cache.
    cached = prompt_tokens - _int(second.get("timings", {}).get("prompt_n"))
    before, after = str(first.get("content")), str(second.get("content"))
    return {
        "passed": verdict(prompt_tokens, cached, before, after),
        "prompt_tokens": prompt_tokens,
        "cached_tokens": cached,
        "same_answer": before == after,
        "at": time.time(),
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class ProbeResults:
    """Verdicts by cache key, kept in one JSON file (written whole, atomically)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._results: dict[str, dict[str, Any]] | None = None

    def get(self, key: str) -> dict[str, Any] | None:
        return self._load().get(key)

    def put(self, key: str, result: dict[str, Any]) -> None:
        results = self._load()
        results[key] = result
        self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = self._path.with_suffix(".partial")
        partial.write_text(json.dumps(results, indent=1, sort_keys=True))
        partial.replace(self._path)

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._results is None:
            try:
                loaded = json.loads(self._path.read_text())
            except (OSError, ValueError):
                loaded = {}
            self._results = loaded if isinstance(loaded, dict) else {}
        return self._results
