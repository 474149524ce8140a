"""Runtime snapshots as plain values, for the pure rules that read them (no process runs)."""

from __future__ import annotations

from typing import Any

from router.config import ModelConfig
from router.domain import Family, Lane, family_for
from router.runtime import RuntimeState, RuntimeView


def runtime_view(cfg: ModelConfig, *lanes: Lane, **fields: Any) -> RuntimeView:
    """A ready, idle runtime of `cfg` on `lanes` (the first is its own lane; TEXT when none),
    of the family its backend mode runs there; `fields` replace any of the view's fields."""
    lanes = lanes or (Lane.TEXT,)
    base: dict[str, Any] = {
        "key": f"{cfg.id}@{lanes[0]}",
        "config": cfg,
        "lane": lanes[0],
        "occupies": frozenset(lanes),
        "family": family_for(cfg.backend_mode, lanes[0]) or Family.KOBOLD,
        "state": RuntimeState.READY,
        "draining": False,
        "leases": 0,
        "since": 0.0,
        "pid": None,
        "port": None,
        "base_url": "",
        "queued": 0,
    }
    return RuntimeView(**(base | fields))
