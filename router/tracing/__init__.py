"""Traces (docs/observability.md, "Traces"): the router's one seam to OpenTelemetry.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and
the `otel` extra is installed: `tracer()` is then the no-op tracer (api.py), and nothing from
opentelemetry is imported. Only router/tracing/otel.py imports it, when tracing is turned on.

One tracer per process (spans ride on contextvars, as OpenTelemetry's own context does); the
server installs it at start and closes it when it stops.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping

from router.tracing.api import (
    CURRENT,
    NO_SPAN,
    Attribute,
    Attributes,
    Kind,
    NoTracer,
    Parent,
    Span,
    Tracer,
)

log = logging.getLogger(__name__)
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_installed: Tracer = NoTracer()


def tracer() -> Tracer:
    return _installed


def install(new: Tracer) -> Tracer:
    """Make `new` the process's tracer; returns the one it replaces."""
    global _installed
    old, _installed = _installed, new
    return old


def wanted(environ: Mapping[str, str]) -> bool:
    """An OTLP endpoint is named and the SDK is not disabled (`OTEL_SDK_DISABLED`)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def enable_from_environment(environ: Mapping[str, str] = os.environ) -> bool:
    """Install the exporting tracer when the environment asks for traces; True when it did."""
    if not wanted(environ) or _installed.enabled:
        return _installed.enabled
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed "
            "(pip install 'tensor-router[otel]'): no traces"
        )
        return False
    from router.tracing import otel

    install(otel.from_environment())
    log.info("traces are exported over OTLP/HTTP")
    return True


def close() -> None:
    """Flush and stop the installed tracer; the no-op one stands in afterwards."""
    install(NoTracer()).close()


__all__ = [
    "CURRENT",
    "NO_SPAN",
    "Attribute",
    "Attributes",
    "Kind",
    "Parent",
    "Span",
    "Tracer",
    "close",
    "enable_from_environment",
    "install",
    "tracer",
    "wanted",
]
