"""Authentication (router/edge/auth.py): key ring, credential sources, the policy table, S17-S19."""

from __future__ import annotations

import hashlib
import types
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from router.config import Settings
from router.config.schema import AuthSection, ClusterSection, SecuritySection, ServerSection
from router.domain import Role, Surface
from router.edge import auth, edge_errors, upstream_request_headers
from router.edge.auth import KeyRing, Policy, auth_middleware, presented_credential
from router.edge.headers import CREDENTIAL_HEADERS
from tests.support.compare_spy import spy_compare_digest

INF, ADM, CLU = "inf-key-0123456789abcdef", "adm-key-0123456789abcdef", "clu-token-0123456789abcd"


@dataclass(frozen=True)
class FakeRoute:
    template: str
    surface: Surface
    role: Role
    state_changing: bool = False
    origin_strict: bool = False
    handler: str = "proxy"


ROUTES = {
    "/health": FakeRoute("/health", Surface.META, Role.PUBLIC),
    "/v1/chat/completions": FakeRoute("/v1/chat/completions", Surface.OPENAI, Role.INFERENCE, True),
    "/api/chat": FakeRoute("/api/chat", Surface.OLLAMA, Role.INFERENCE, True, True),
    "/router/v1/unload": FakeRoute("/router/v1/unload", Surface.CONTROL, Role.ADMIN, True),
    "/router/v1/site/analytics": FakeRoute("/router/v1/site/analytics", Surface.SITE, Role.ADMIN),
    "/router/v1/node/models": FakeRoute("/router/v1/node/models", Surface.NODE, Role.CLUSTER),
    "/router/v1/shutdown": FakeRoute(
        "/router/v1/shutdown", Surface.CONTROL, Role.ADMIN, True, handler="control.shutdown"
    ),
}
ROUTE = web.RequestKey("route", FakeRoute)


def route_of(request: web.Request) -> FakeRoute:
    if ROUTE not in request:
        request[ROUTE] = ROUTES[request.path]
    return request[ROUTE]


def make_settings(
    profile: str = "secure",
    inference: tuple[str, ...] = (INF,),
    admin: tuple[str, ...] = (ADM,),
    cluster: str | None = CLU,
    bind: str = "127.0.0.1:8080",
) -> Settings:
    return Settings(
        security=SecuritySection(profile=profile),  # type: ignore[arg-type]
        server=ServerSection(bind=bind),
        auth=AuthSection(inference_keys=inference, admin_keys=admin),
        cluster=ClusterSection(token=cluster),
    )


async def client_for(aiohttp_client, conf: Settings):  # type: ignore[no-untyped-def]
    """authenticate behind the app's real error renderer; the handler answers with the headers
    production would forward to a backend."""

    async def handler(request: web.Request) -> web.Response:
        forwarded = upstream_request_headers(request.headers)
        return web.json_response({"forwarded": sorted(forwarded), "host": request.host})

    middlewares = [
        edge_errors(conf, route_of),
        auth_middleware(KeyRing.from_settings(conf), conf, route_of),
    ]
    app = web.Application(middlewares=middlewares)
    app.router.add_route("*", "/{tail:.*}", handler)
    return await aiohttp_client(app)


# --- key ring -----------------------------------------------------------------------------


def test_role_for_each_kind_of_key() -> None:
    ring = KeyRing((INF, "inf-2"), (ADM,), (CLU,))
    assert ring.role_for(INF) is Role.INFERENCE and ring.role_for("inf-2") is Role.INFERENCE
    assert ring.role_for(ADM) is Role.ADMIN
    assert ring.role_for(CLU) is Role.CLUSTER
    assert ring.role_for("nope") is None
    assert ring.role_for("") is None and ring.role_for(None) is None
    assert ring.role_for(INF + " ") is None  # no normalization of key material


def test_keyring_keeps_digests_not_keys() -> None:
    ring = KeyRing((INF,), (ADM,), (CLU,))
    stored = repr(vars(ring))
    for key in (INF, ADM, CLU):
        assert key not in stored
        assert hashlib.sha256(key.encode()).digest() in dict(ring._entries)


def test_a_key_cannot_serve_two_roles() -> None:
    with pytest.raises(ValueError, match="one role"):
        KeyRing((), (ADM,), (ADM,))
    assert len(KeyRing((INF, INF), (), ())) == 1  # a repeat within a role is harmless


def test_from_settings_reads_both_cluster_token_fields() -> None:
    conf = Settings(auth=AuthSection(cluster_token=CLU))
    assert KeyRing.from_settings(conf).role_for(CLU) is Role.CLUSTER
    assert KeyRing.from_settings(make_settings()).role_for(CLU) is Role.CLUSTER


def test_s18_every_stored_digest_is_compared_whatever_matches(monkeypatch) -> None:
    ring = KeyRing(("i1", "i2", "i3"), ("a1", "a2"), ("c1",))
    calls = spy_compare_digest(monkeypatch)
    for presented, role in [
        ("i1", Role.INFERENCE),
        ("c1", Role.CLUSTER),
        ("a2", Role.ADMIN),
        ("zz", None),
    ]:
        calls.clear()
        assert ring.role_for(presented) is role
        assert len(calls) == len(ring) == 6  # no early exit on the first, last or no match
        probe = hashlib.sha256(presented.encode()).digest()
        assert {a for a, _ in calls} == {probe}  # digests compared, never raw keys
        assert {b for _, b in calls} == {d for d, _ in ring._entries}


async def test_s19_one_plain_digest_per_request_and_no_kdf(aiohttp_client, monkeypatch) -> None:
    conf = make_settings(inference=("i1", "i2", "i3", INF), admin=("a1", ADM))
    client = await client_for(aiohttp_client, conf)
    count = [0]

    def sha256(data: bytes = b""):  # type: ignore[no-untyped-def]
        count[0] += 1
        return hashlib.sha256(data)

    # Only sha256 is offered: a KDF (pbkdf2_hmac, scrypt) would fail with AttributeError.
    monkeypatch.setattr(auth, "hashlib", types.SimpleNamespace(sha256=sha256))
    for _ in range(3):
        resp = await client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {INF}"})
        assert resp.status == 200
    assert count[0] == 3


# --- where credentials come from ----------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Authorization": "Bearer k1"}, "k1"),
        ({"Authorization": "bearer   k1 "}, "k1"),
        ({"X-Api-Key": "k2"}, "k2"),
        ({"Authorization": "Bearer k1", "X-Api-Key": "k2"}, "k1"),
        ({"Authorization": "Basic dXNlcjpwdw=="}, None),
        ({"Authorization": "Basic dXNlcjpwdw==", "x-api-key": "k2"}, "k2"),
        ({"Authorization": "Bearer "}, None),
        ({}, None),
    ],
)
def test_presented_credential(headers: dict[str, str], expected: str | None) -> None:
    assert presented_credential(CIMultiDict(headers)) == expected


async def test_credentials_are_not_among_the_forwarded_headers(aiohttp_client) -> None:
    client = await client_for(aiohttp_client, make_settings())
    sent = {"Authorization": f"Bearer {INF}", "Cookie": "s=1", "Accept": "a"}
    body = await (await client.post("/v1/chat/completions", headers=sent)).json()
    assert "Accept" in body["forwarded"]
    assert not {h.lower() for h in body["forwarded"]} & {"authorization", "x-api-key", "cookie"}


@pytest.mark.parametrize("param", ["key", "api_key", "token", "API_KEY"])
async def test_key_in_query_string_is_never_accepted(aiohttp_client, param) -> None:
    client = await client_for(aiohttp_client, make_settings())
    resp = await client.post(f"/v1/chat/completions?{param}={INF}")
    assert resp.status == 401
    body = await resp.text()
    assert "URL" in body and INF not in body


# --- the policy table (docs/security.md), both profiles -----------------------------------

# credential -> headers
CREDS = {
    "none": {},
    "inference": {"Authorization": f"Bearer {INF}"},
    "admin": {"X-Api-Key": ADM},
    "cluster": {"Authorization": f"Bearer {CLU}"},
    "wrong": {"Authorization": "Bearer not-a-key-at-all-000000"},
}
# path -> expected status per credential, secure profile
SECURE = {
    "/health": dict(none=200, inference=200, admin=200, cluster=200, wrong=200),
    "/v1/chat/completions": dict(none=401, inference=200, admin=200, cluster=403, wrong=401),
    "/api/chat": dict(none=401, inference=200, admin=200, cluster=403, wrong=401),
    "/router/v1/unload": dict(none=401, inference=403, admin=200, cluster=403, wrong=401),
    "/router/v1/site/analytics": dict(none=401, inference=403, admin=200, cluster=403, wrong=401),
    "/router/v1/shutdown": dict(none=401, inference=403, admin=200, cluster=403, wrong=401),
    "/router/v1/node/models": dict(none=401, inference=403, admin=403, cluster=200, wrong=401),
}
# trusted_lan: inference and admin checks are off; the cluster check never is.
TRUSTED = {path: dict.fromkeys(CREDS, 200) for path in SECURE}
TRUSTED["/router/v1/node/models"] = SECURE["/router/v1/node/models"]


@pytest.mark.parametrize(("profile", "table"), [("secure", SECURE), ("trusted_lan", TRUSTED)])
async def test_policy_table(aiohttp_client, profile, table) -> None:
    client = await client_for(aiohttp_client, make_settings(profile=profile))
    assert set(table) == set(ROUTES)  # a route missing from the table fails here
    for path, expected in table.items():
        for cred, status in expected.items():
            resp = await client.post(path, headers=CREDS[cred])
            assert resp.status == status, (profile, path, cred)
            if status == 200:
                forwarded = {h.lower() for h in (await resp.json())["forwarded"]}
                assert "accept" in forwarded and not forwarded & CREDENTIAL_HEADERS
            if status == 401:
                assert resp.headers["WWW-Authenticate"] == "Bearer"


async def test_errors_use_the_route_surface(aiohttp_client) -> None:
    client = await client_for(aiohttp_client, make_settings())
    ollama = await (await client.post("/api/chat")).json()
    assert isinstance(ollama["error"], str)
    openai = await (await client.post("/v1/chat/completions")).json()
    assert openai["error"]["type"] == "authentication_error"
    forbidden = await (await client.post("/router/v1/unload", headers=CREDS["inference"])).json()
    assert forbidden["error"]["type"] == "permission_error"


def test_policy_names_the_role_a_request_acts_with() -> None:
    conf = make_settings()
    policy = Policy(KeyRing.from_settings(conf), conf)

    def request(headers: dict[str, str]) -> web.Request:
        return make_mocked_request("POST", "/v1/chat/completions", headers=headers)

    chat, health = ROUTES["/v1/chat/completions"], ROUTES["/health"]
    assert policy.check(request(CREDS["admin"]), chat) is Role.ADMIN
    assert policy.check(request(CREDS["inference"]), chat) is Role.INFERENCE
    assert policy.check(request({}), health) is None


# --- shutdown and keyless setups ----------------------------------------------------------


async def test_shutdown_in_secure_needs_a_configured_admin_key(aiohttp_client) -> None:
    client = await client_for(aiohttp_client, make_settings(admin=()))
    resp = await client.post("/router/v1/shutdown", headers=CREDS["inference"])
    assert resp.status == 403
    assert "admin key is configured" in (await resp.json())["error"]["message"]


async def test_shutdown_in_trusted_lan_needs_no_key(aiohttp_client) -> None:
    conf = make_settings(profile="trusted_lan", inference=(), admin=(), cluster=None)
    client = await client_for(aiohttp_client, conf)
    assert (await client.post("/router/v1/shutdown")).status == 200


async def test_secure_loopback_without_any_key_is_open_except_shutdown(aiohttp_client) -> None:
    client = await client_for(aiohttp_client, make_settings(inference=(), admin=(), cluster=None))
    assert (await client.post("/v1/chat/completions")).status == 200
    assert (await client.post("/router/v1/unload")).status == 200
    assert (await client.post("/router/v1/shutdown")).status == 403
    assert (await client.post("/router/v1/node/models")).status == 403  # no cluster token


async def test_secure_without_keys_on_a_lan_bind_stays_closed(aiohttp_client) -> None:
    conf = make_settings(inference=(), admin=(), cluster=None, bind="0.0.0.0:8080")
    client = await client_for(aiohttp_client, conf)
    assert (await client.post("/v1/chat/completions")).status == 401
    assert (await client.post("/router/v1/unload", headers=CREDS["wrong"])).status == 401


async def test_inference_keys_only_closes_admin_routes(aiohttp_client) -> None:
    client = await client_for(aiohttp_client, make_settings(admin=()))
    assert (await client.post("/v1/chat/completions", headers=CREDS["inference"])).status == 200
    assert (await client.post("/router/v1/unload", headers=CREDS["inference"])).status == 403
    assert (await client.post("/router/v1/unload")).status == 401


async def test_cluster_routes_without_a_token_configured_are_refused(aiohttp_client) -> None:
    for profile in ("secure", "trusted_lan"):
        client = await client_for(aiohttp_client, make_settings(profile=profile, cluster=None))
        resp = await client.post("/router/v1/node/models", headers=CREDS["admin"])
        assert resp.status == 403
        assert "cluster token" in (await resp.json())["error"]["message"]
