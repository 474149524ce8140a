"""The node's SQLite store: analytics, load captures, load errors and model state.

See docs/store.md for the tables, the writer's guarantees and what is left to later migrations.
The names below load on first use, so the event writer process (event_writer.py) can import
rows.py without pulling in aiohttp and the rest of the router.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from router.store.captures import CaptureFilter, argv_without_secrets, sanitize_kcpps
    from router.store.load_attempts import LoadAttempts
    from router.store.store import Store

_HOMES = {
    "CaptureFilter": "router.store.captures",
    "argv_without_secrets": "router.store.captures",
    "sanitize_kcpps": "router.store.captures",
    "LoadAttempts": "router.store.load_attempts",
    "Store": "router.store.store",
}

__all__ = ["CaptureFilter", "LoadAttempts", "Store", "argv_without_secrets", "sanitize_kcpps"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'router.store' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
