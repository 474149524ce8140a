"""Turning a record's attributes into the plain dict its JSON view starts from.

Kept free of imports from the rest of the package, like router.domain, so any layer may use it.
"""

from __future__ import annotations

from typing import Any


def pick(obj: object, *names: str) -> dict[str, Any]:
    """`obj`'s named attributes, keyed by name in the order given. A view that changes a value
    overrides it after (`pick(...) | {"name": new}`), which keeps the key where it stood."""
    return {name: getattr(obj, name) for name in names}
