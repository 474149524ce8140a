"""Configuration: the router.yaml schema and its loading, .kcpps parsing, the model catalog,
and the unload-policy triggers. The lowest layer beside `domain` and `errors`: it does no
routing and imports nothing above it.
"""

from __future__ import annotations

from router.config.catalog import Catalog, CatalogChange
from router.config.kcpps import ModelConfig
from router.config.load import load_settings, resolve_config_path
from router.config.schema import (
    AnalyticsSection,
    ProgramSection,
    Settings,
    SettingsError,
    parse_duration,
)
from router.config.unload_policy import evicts, static_lanes

__all__ = [
    "AnalyticsSection",
    "Catalog",
    "CatalogChange",
    "ModelConfig",
    "ProgramSection",
    "Settings",
    "SettingsError",
    "evicts",
    "load_settings",
    "parse_duration",
    "resolve_config_path",
    "static_lanes",
]
