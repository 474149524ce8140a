"""The single owner of what runs where: the manager (`ensure` -> `Lease`, `views()` ->
`RuntimeView`), the runtime state enum with checked transitions, the pure scheduler, the pure
model choice for unnamed requests, the loader, and load-capture observers.
"""

from __future__ import annotations

from router.runtime.captures import observer_factory
from router.runtime.choice import active_view, choose_config, public_id
from router.runtime.loader import Loader
from router.runtime.manager import Lease, RuntimeManager, primary_lane
from router.runtime.state import (
    LoadObserver,
    Runtime,
    RuntimeSpec,
    RuntimeState,
    RuntimeView,
    spec_for,
)

__all__ = [
    "Lease",
    "LoadObserver",
    "Loader",
    "Runtime",
    "RuntimeManager",
    "RuntimeSpec",
    "RuntimeState",
    "RuntimeView",
    "active_view",
    "choose_config",
    "observer_factory",
    "primary_lane",
    "public_id",
    "spec_for",
]
