"""Configuration: the router.yaml schema and its loading, .kcpps parsing, the model catalog,
and the unload-policy triggers. A bottom layer (docs/architecture.md): it does no routing and
imports only `router.domain`.
"""

from __future__ import annotations

from router.config.catalog import Catalog
from router.config.kcpps import ModelConfig
from router.config.load import load_settings, resolve_config_path
from router.config.schema import (
    PROGRAM_SECTIONS,
    AnalyticsSection,
    ProgramSection,
    Settings,
    SettingsError,
    parse_duration,
)
from router.config.unload_policy import evicts, static_lanes

__all__ = [
    "PROGRAM_SECTIONS",
    "AnalyticsSection",
    "Catalog",
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
