"""S17: every route of the route table x every credential kind x both profiles, through the
real app, against a policy declared here independently of the code."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from router.app import create_app
from router.appkeys import SHUTDOWN
from router.classify import ROUTES, Route
from router.config import Settings
from router.domain import Role

INFERENCE_KEY = "inf-6d1f0c2a9b7e4f31"
ADMIN_KEY = "adm-93be27d4c0a15f68"
CLUSTER_TOKEN = "clu-5a8e13f7b2d94c06"
WRONG_KEY = "nope-0000000000000000"

# The declared policy: which role each part of the URL space needs. A route whose role does
# not follow from these rules fails test_every_route_is_covered_by_the_declared_policy.
POLICY_BY_PREFIX: tuple[tuple[str, Role], ...] = (
    ("/health", Role.PUBLIC),
    ("/router/ui/", Role.PUBLIC),  # the WebUI's static files; its data comes from /router/v1/
    ("/router/v1/ui/session", Role.PUBLIC),  # the WebUI asks here whether to sign in
    ("/router/v1/node/", Role.CLUSTER),
    ("/router/v1/", Role.ADMIN),
    ("/router/webuis/", Role.ADMIN),  # the ticket redirect to a backend UI (docs/webuis.md)
    ("/metrics", Role.ADMIN),
    ("/slots", Role.ADMIN),  # other clients' prompts live there (docs/routes.md)
    ("/", Role.INFERENCE),
)

CREDENTIALS = ("none", "inference", "admin", "cluster", "wrong", "query")
ALLOWED = 0  # anything but 401/403

# (profile, role) -> credential -> expected status (ALLOWED or the refusal).
EXPECTED: dict[tuple[str, Role], dict[str, int]] = {
    ("secure", Role.PUBLIC): dict.fromkeys(CREDENTIALS, ALLOWED),
    ("secure", Role.INFERENCE): {
        "none": 401,
        "inference": ALLOWED,
        "admin": ALLOWED,
        "cluster": 403,
        "wrong": 401,
        "query": 401,
    },
    ("secure", Role.ADMIN): {
        "none": 401,
        "inference": 403,
        "admin": ALLOWED,
        "cluster": 403,
        "wrong": 401,
        "query": 401,
    },
    ("secure", Role.CLUSTER): {
        "none": 401,
        "inference": 403,
        "admin": 403,
        "cluster": ALLOWED,
        "wrong": 401,
        "query": 401,
    },
    ("trusted_lan", Role.PUBLIC): dict.fromkeys(CREDENTIALS, ALLOWED),
    ("trusted_lan", Role.INFERENCE): dict.fromkeys(CREDENTIALS, ALLOWED),
    ("trusted_lan", Role.ADMIN): dict.fromkeys(CREDENTIALS, ALLOWED),
    ("trusted_lan", Role.CLUSTER): {
        "none": 401,
        "inference": 403,
        "admin": 403,
        "cluster": ALLOWED,
        "wrong": 401,
        "query": 401,
    },
}


# Exact templates first: Ollama's liveness probe is public like /health; /api/pull downloads
# model files, which is an admin's act like every download (docs/ollama.md).
POLICY_EXACT: dict[str, Role] = {"/": Role.PUBLIC, "/api/pull": Role.ADMIN}


def declared_role(template: str) -> Role:
    if template in POLICY_EXACT:
        return POLICY_EXACT[template]
    for prefix, role in POLICY_BY_PREFIX:
        if template == prefix.rstrip("/") or template.startswith(prefix):
            return role
    raise AssertionError(f"{template} is not covered by the declared policy")


def concrete_path(route: Route) -> str:
    path = re.sub(r"\{[^}]+\}", "x", route.template)
    return path if path.startswith("/") else "/" + path


def headers_for(credential: str) -> dict[str, str]:
    key = {
        "inference": INFERENCE_KEY,
        "admin": ADMIN_KEY,
        "cluster": CLUSTER_TOKEN,
        "wrong": WRONG_KEY,
    }
    if credential in key:
        return {"Authorization": f"Bearer {key[credential]}"}
    return {}


def test_every_route_is_covered_by_the_declared_policy() -> None:
    for route in ROUTES:
        assert route.role is declared_role(route.template), route.template


def _settings(tmp: Path, profile: str) -> Settings:
    (tmp / "kcpps").mkdir(exist_ok=True)
    return Settings.model_validate(
        {
            "security": {"profile": profile},
            "models": {"config_dir": tmp / "kcpps"},
            "auth": {"inference_keys": [INFERENCE_KEY], "admin_keys": [ADMIN_KEY]},
            "cluster": {"token": CLUSTER_TOKEN},
            "analytics": {"database_path": tmp / "data" / "router.sqlite"},
            # Each download action is a route now; with the hub on, the secure profile's own
            # refusal of the hub address is a 403 the matrix would take for the key's.
            "downloads": {"enabled": False},
        }
    )


@pytest.fixture(params=["secure", "trusted_lan"])
async def client(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, TestClient]]:
    app = create_app(_settings(tmp_path, request.param))
    app[SHUTDOWN] = lambda: None  # the route is exercised; the test process keeps running
    server = TestServer(app, host="127.0.0.1", handler_cancellation=True)
    async with TestClient(server) as test_client:
        yield request.param, test_client


async def test_s17_authorization_matrix(client: tuple[str, TestClient]) -> None:
    profile, test_client = client
    failures = []
    for route in ROUTES:
        path = concrete_path(route)
        for method in sorted(route.methods):
            for credential in CREDENTIALS:
                query = {"api_key": INFERENCE_KEY} if credential == "query" else None
                async with test_client.request(
                    method, path, headers=headers_for(credential), params=query, data=b""
                ) as response:
                    status = response.status
                expected = EXPECTED[(profile, route.role)][credential]
                ok = status not in (401, 403) if expected == ALLOWED else status == expected
                if not ok:
                    failures.append(
                        f"{profile} {method} {path} [{credential}] -> {status}, want {expected or 'allowed'}"
                    )
    assert not failures, "\n".join(failures[:40])


async def test_keys_are_never_forwarded_in_error_bodies(client: tuple[str, TestClient]) -> None:
    _, test_client = client
    response = await test_client.post(
        "/v1/chat/completions", headers=headers_for("wrong"), json={"model": "x"}
    )
    body = await response.text()
    for secret in (WRONG_KEY, INFERENCE_KEY, ADMIN_KEY, CLUSTER_TOKEN):
        assert secret not in body
