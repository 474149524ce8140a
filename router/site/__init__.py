"""Site management logic that needs no HTTP: configuration files and cook (the handlers are in
router/api/site_configs.py)."""

from __future__ import annotations

from router.site.configs import Finding
from router.site.cook import CookPlan

__all__ = ["CookPlan", "Finding"]
