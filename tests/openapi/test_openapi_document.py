"""The OpenAPI description covers the route table, and the router's answers match it.

The description is generated from ROUTES and ENTRIES (router/openapi), so the only ways it can
drift are a row whose handler has no entry (refused here) and a shape that no longer matches
what the handler writes (the live checks below, and tests/openapi/test_openapi_schemathesis.py).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Err

from router.classify import ROUTES, BodyMode, Route
from router.domain import Role, Surface
from router.openapi import ENTRIES, MissingEntry, build, document, openapi_path
from tests.support.harness import RouterHarness


def test_every_route_row_has_a_description_entry() -> None:
    missing = sorted({r.handler for r in ROUTES} - set(ENTRIES))
    assert missing == [], f"add these handlers to router/openapi/entries.py: {missing}"
    stale = sorted(set(ENTRIES) - {r.handler for r in ROUTES})
    assert stale == [], f"entries for handlers no route names: {stale}"


def test_a_row_without_an_entry_fails_the_build() -> None:
    row = Route("/router/v1/new", frozenset({"GET"}), Surface.CONTROL, None, Role.ADMIN, "x.new")
    with pytest.raises(MissingEntry, match="x.new"):
        build((*ROUTES, row))


def test_every_row_and_method_is_an_operation() -> None:
    paths = document()["paths"]
    for route in ROUTES:
        item = paths[openapi_path(route.template)]
        for method in route.methods - {"HEAD"}:
            op = item[method.lower()]
            assert op["x-handler"] == route.handler
            assert op["x-role"] == route.role.value
            assert "default" in op["responses"]  # the router's refusals, in the surface's shape
            if route.body is BodyMode.NONE:
                assert "requestBody" not in op


def test_catch_alls_are_path_parameters() -> None:
    op = document()["paths"]["/v1/{tail}"]["post"]
    assert [p["name"] for p in op["parameters"] if p["in"] == "path"] == ["tail"]
    assert op["x-forwarded"] is True


def test_the_description_is_valid_openapi() -> None:
    schema = schemathesis.openapi.from_dict(json.loads(json.dumps(document())))
    results = list(schema.get_all_operations())
    errors = [r.err() for r in results if isinstance(r, Err)]
    assert errors == []
    assert len(results) == sum(len(r.methods - {"HEAD"}) for r in ROUTES)


# ---- live: the synthesized answers, with a model loaded, against the description -------------


def _check(schema: Any, method: str, path: str, response: httpx.Response) -> None:
    op = schema.find_operation_by_path(method, path)
    assert op is not None, (method, path)
    try:
        op.validate_response(response)
    except FailureGroup as exc:
        raise AssertionError(f"{method} {path} -> {response.status_code}: {exc}") from None


async def test_synthesized_answers_match_the_description(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.model("art", sdmodel="art.safetensors")
    client = await harness.start()
    served = (await client.get("/router/v1/openapi.json")).json()
    assert served == json.loads(json.dumps(document()))
    schema = schemathesis.openapi.from_dict(served)
    loaded = await client.post("/router/v1/load", json={"model": "chat-a"})
    assert loaded.status_code == 200, loaded.text
    _check(schema, "POST", "/router/v1/load", loaded)
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "/health", None),
        ("GET", "/v1/models", None),
        ("GET", "/v1/models/chat-a", None),
        ("GET", "/v1/models/nope", None),  # the error shape
        ("GET", "/sdapi/v1/sd-models", None),
        ("GET", "/router/v1/models", None),
        ("GET", "/router/v1/status", None),
        ("GET", "/router/v1/ui/session", None),
        ("GET", "/router/v1/site/models/state", None),
        ("GET", "/router/v1/site/nodes/state", None),
        ("GET", "/router/v1/site/nodes/backends/init", None),
        ("GET", "/router/v1/site/load-errors", None),
        ("GET", "/router/v1/site/load-captures", None),
        ("GET", "/router/v1/site/offload/decisions", None),
        ("GET", "/api/tags", None),
        ("GET", "/api/ps", None),
        ("GET", "/api/version", None),
        ("POST", "/api/show", {"model": "chat-a"}),
        ("POST", "/api/show", {"model": "nope"}),  # Ollama's error shape
        ("POST", "/router/v1/unload", {"target": "all"}),
    ]
    for method, path, body in calls:
        response = await client.request(method, path, json=body)
        _check(schema, method, path, response)
    ps = (await client.get("/api/ps")).json()
    assert ps == {"models": []}  # unloaded by the last call
