"""observability.trace_url: an http(s) URL with a {trace_id} placeholder, or nothing; and what
turns traces on (the standard OTEL_* variables, never a router setting)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from router import tracing
from router.config import Settings


def test_the_viewer_url_needs_its_placeholder() -> None:
    url = "http://tempo.lan:3000/explore?trace={trace_id}"
    assert Settings.model_validate({"observability": {"trace_url": url}}).observability.trace_url
    assert Settings().observability.trace_url is None
    for bad in ("http://tempo.lan/explore", "javascript:alert(1)//{trace_id}"):
        with pytest.raises(ValidationError, match="trace_id"):
            Settings.model_validate({"observability": {"trace_url": bad}})


def test_traces_are_wanted_only_with_an_endpoint_and_the_sdk_not_disabled() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/v1/traces"})
    off = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
    assert not tracing.wanted(off)
    assert not tracing.enable_from_environment({}) and not tracing.tracer().enabled


def test_the_resource_is_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OTLP encoder hashes the resource for every span; the SDK's hash dumps its
    attributes as JSON each time. The router's resource does that once, with the same hash."""
    from opentelemetry.sdk import resources

    from router.tracing import otel

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    found = otel.resource()
    plain = resources.Resource(found.attributes, found.schema_url)
    assert hash(found) == hash(plain) and found == plain
    assert found.attributes["service.name"] == "tensor-router"

    def dumped(*_: object, **__: object) -> str:
        raise AssertionError("the resource was hashed again")

    monkeypatch.setattr(resources, "dumps", dumped)
    assert hash(found) == hash(found)
