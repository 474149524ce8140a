"""The last KV cache save and restore of each model, for its WebUI page (issue 33).

Fed by the bus: the `kv_cache` events the backend client publishes for every bounded save and
restore (`action`, `result`, `ms`, and the work's own fields such as `slots`, `conversations`,
`tokens`, or `reason` on a failure). Kept in memory: after a restart the page says no save or
restore happened yet in this run, which is true. A `failed` or `timeout` restore is flagged as
a warning, so a page never says persistence is on while every restore fails.
"""

from __future__ import annotations

from typing import Any

ACTIONS = ("save", "restore")
_KEPT = ("result", "ms", "time", "slots", "conversations", "tokens", "reason")
_BAD = frozenset({"failed", "timeout"})


class KvHistory:
    def __init__(self) -> None:
        self._last: dict[tuple[str, str], dict[str, Any]] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        """Bus callback: remember the newest save and restore of each model."""
        action = event.get("action")
        if event.get("event") != "kv_cache" or action not in ACTIONS:
            return
        model = event.get("model")
        if isinstance(model, str):
            self._last[(model, str(action))] = {k: event[k] for k in _KEPT if k in event}

    def last(self, model: str) -> dict[str, Any]:
        """{save, restore, warning}: each the newest record or None; `warning` says why the
        newest restore is not to be trusted (None when it is fine or there was none)."""
        save, restore = (self._last.get((model, a)) for a in ACTIONS)
        return {"save": save, "restore": restore, "warning": restore_warning(restore)}


def restore_warning(restore: dict[str, Any] | None) -> str | None:
    """Pure: the warning line for a restore record, or None."""
    if restore is None or restore.get("result") not in _BAD:
        return None
    reason = restore.get("reason") or restore["result"]
    return f"The last restore failed ({reason}): the next request starts without the saved cache."
