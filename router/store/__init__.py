"""The node's SQLite store: analytics, load captures, load errors and model state.

See docs/store.md for the tables, the writer's guarantees and what is left to later migrations.
"""

from router.store.captures import CaptureFilter, argv_without_secrets, sanitize_kcpps
from router.store.store import Store

__all__ = ["CaptureFilter", "Store", "argv_without_secrets", "sanitize_kcpps"]
