"""Site management logic that needs no HTTP: plain `.kcpps` files (names, screening, findings,
atomic writes) and cook plans. The handlers are in router/api/site_configs.py."""

from __future__ import annotations

from router.site.configs import (
    SUFFIX,
    Finding,
    catalog_findings,
    check_config,
    config_name,
    existing,
    first_error,
    plain_name,
    remove_file,
    render,
    screen_options,
    write_atomic,
)
from router.site.cook import CookPlan, plan_cook, probe_model_file

__all__ = [
    "SUFFIX",
    "CookPlan",
    "Finding",
    "catalog_findings",
    "check_config",
    "config_name",
    "existing",
    "first_error",
    "plain_name",
    "plan_cook",
    "probe_model_file",
    "remove_file",
    "render",
    "screen_options",
    "write_atomic",
]
