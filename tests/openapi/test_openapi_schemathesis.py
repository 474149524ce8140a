"""schemathesis against a live `tensor-router start` with fake backends, over its own description.

Each operation the router answers itself gets a few generated requests (a fixed seed:
hypothesis' derandomize) and every answer is checked: no 5xx from the router, a documented
status and content type, a body that matches the documented schema. Both generation modes run:
positive (requests the description allows) and negative (requests it forbids: wrong types,
missing required fields, which the router must refuse with a 4xx in its error shape). Bounded:
EXAMPLES requests per operation and mode, no shrinking. The operations left out are EXCLUDED
below with the reason; docs/openapi.md lists them too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from router.openapi import document
from tests.support.harness import RouterHarness
from tests.support.router_process import new_router

pytestmark = pytest.mark.timeout(240)

EXAMPLES = 6
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
_HUB = "asks the model hub (no network here: it would wait for a timeout)"
_WRITES = "writes or deletes files on disk"
EXCLUDED: dict[str, str] = {
    "POST /router/v1/shutdown": "stops the router under test",
    "POST /router/v1/load": "loads models (a backend start per example)",
    "POST /router/v1/benchmarks/run": "loads a model and runs a benchmark",
    "GET /router/v1/events": "an event stream that lasts until the client leaves",
    "GET /router/v1/site/nodes/backends/init/{job_id}/events": "an event stream",
    "GET /router/v1/site/download/jobs/{job_id}/events": "an event stream",
    "POST /router/v1/site/nodes/backends/init": "runs backend build steps (minutes)",
    "POST /router/v1/site/download/search": _HUB,
    "POST /router/v1/site/download/search-page": _HUB,
    "POST /router/v1/site/download/repository": _HUB,
    "POST /router/v1/site/download/plan": _HUB,
    "POST /router/v1/site/download/jobs": "starts a real download",
    "POST /api/pull": "asks the model hub and starts a real download (tests/ollama/test_pull.py)",
    "POST /router/v1/site/model-assets/jobs": "starts a real download",
    "POST /router/v1/site/model-assets/resolve": _HUB,
    "POST /router/v1/site/model-assets/resolve-batch": _HUB,
    "POST /router/v1/site/model-assets/candidates": _HUB,
    "POST /router/v1/site/webuis/load": "loads a model for a backend WebUI",
    "POST /router/v1/site/cook/apply": _WRITES,
    "DELETE /router/v1/site/cook/{cook_id}": _WRITES,
    "POST /router/v1/site/config-file/apply": _WRITES,
    "DELETE /router/v1/site/config-file": _WRITES,
    "POST /router/v1/site/model-assets/export": _WRITES,
    "POST /router/v1/site/model-assets/import": _WRITES,
    "POST /router/v1/site/model-assets/bind": _WRITES,
    "POST /router/v1/site/model-assets/substitute": _WRITES,
}
# Forwarded operations (`x-forwarded`) load a model and pass the backend's answer through;
# tests/edge/test_route_fuzz.py covers them (no router 500 on any route of the table). Cluster-token
# operations (`x-role: cluster`) are all refused (403) before any handler by a standalone router
# without a cluster token; the cluster tests (tests/cluster/) exercise them.


def _operations(schema: Any) -> list[Any]:
    ops = [r.ok() for r in schema.get_all_operations() if isinstance(r, Ok)]
    return [
        op
        for op in ops
        if op.label not in EXCLUDED
        and not op.definition.raw.get("x-forwarded", False)
        and op.definition.raw.get("x-role") != "cluster"
    ]


def _exercise(op: Any, base: str, mode: GenerationMode) -> None:
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        case.call_and_validate(base_url=base, checks=CHECKS, allow_redirects=False, timeout=15)

    try:
        run()
    except Unsatisfiable:
        # Nothing to negate (no parameter, no body): the positive run covered the operation.
        if mode is not GenerationMode.NEGATIVE:
            raise


def test_router_answers_match_its_openapi_description(tmp_harness: RouterHarness) -> None:
    h = tmp_harness
    h.model("chat-a")
    h.model("art", sdmodel="art.safetensors")
    router = new_router(h)
    asyncio.run(router.start())
    schema = schemathesis.openapi.from_url(f"{router.base}/router/v1/openapi.json")
    ops = _operations(schema)
    assert len(ops) > 50, [op.label for op in ops]
    failures: list[str] = []
    for op in ops:
        for mode in MODES:
            try:
                _exercise(op, router.base, mode)
            except (Exception, BaseExceptionGroup) as exc:  # all failures reported together
                failures.append(f"{op.label} ({mode.value}): {str(exc)[:1500]}")
    assert failures == [], "\n\n".join(failures)


def test_exclusions_name_real_operations() -> None:
    """A renamed route must not silently re-enter the run (nor an exclusion outlive it)."""
    labels = {
        f"{method.upper()} {path}" for path, item in document()["paths"].items() for method in item
    }
    assert set(EXCLUDED) <= labels, sorted(set(EXCLUDED) - labels)
