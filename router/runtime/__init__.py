"""The single owner of what runs where: the manager (`ensure` -> `Lease`), the runtime state
enum with checked transitions, the pure scheduler, the loader, and load-capture observers.
"""

from __future__ import annotations

from router.runtime.captures import observer_factory
from router.runtime.loader import Loader
from router.runtime.manager import Lease, RuntimeManager, primary_lane
from router.runtime.state import LoadObserver, Runtime, RuntimeSpec, RuntimeState, spec_for

__all__ = [
    "Lease",
    "LoadObserver",
    "Loader",
    "Runtime",
    "RuntimeManager",
    "RuntimeSpec",
    "RuntimeState",
    "observer_factory",
    "primary_lane",
    "spec_for",
]
