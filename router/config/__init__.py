"""Configuration: the router.yaml schema and its loading, .kcpps parsing, the model catalog,
and the unload-policy triggers. A bottom layer (docs/architecture.md): it does no routing and
imports only `router.domain`.
"""

from __future__ import annotations

from router.config.catalog import Catalog, CatalogChange
from router.config.durations import parse_duration
from router.config.kcpps import (
    AUX_COMPONENTS,
    ID_PATTERN,
    LIST_COMPONENTS,
    MAX_KCPPS_BYTES,
    canonical_key,
    parse_kcpps,
    screened_key,
)
from router.config.load import load_settings, resolve_config_path
from router.config.model_config import KcppsError, ModelConfig
from router.config.schema import (
    PROGRAM_SECTIONS,
    AnalyticsSection,
    DownloadsSection,
    LendingSettings,
    ProgramSection,
    Settings,
    SettingsError,
)
from router.config.unload_policy import evicts, static_lanes

__all__ = [
    "AUX_COMPONENTS",
    "ID_PATTERN",
    "LIST_COMPONENTS",
    "MAX_KCPPS_BYTES",
    "PROGRAM_SECTIONS",
    "AnalyticsSection",
    "Catalog",
    "CatalogChange",
    "DownloadsSection",
    "KcppsError",
    "LendingSettings",
    "ModelConfig",
    "ProgramSection",
    "Settings",
    "SettingsError",
    "canonical_key",
    "evicts",
    "load_settings",
    "parse_duration",
    "parse_kcpps",
    "resolve_config_path",
    "screened_key",
    "static_lanes",
]
