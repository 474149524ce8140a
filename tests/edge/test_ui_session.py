"""The WebUI sign-in over real HTTP: `/router/v1/ui/session`, the session cookie as the admin
role, the CSRF token on unsafe requests, expiry, sign-out, the failed-login limit, and Bearer
keys that keep working beside it (router/api/admin/ui.py, router/edge/auth.py)."""

from __future__ import annotations

import time
from http.cookies import SimpleCookie
from typing import Any

import httpx
import pytest

from router.appkeys import AUTH
from router.config import Settings
from router.edge.ui_sessions import COOKIE_NAME, LoginLimiter, UiSessions
from tests.support.harness import RouterHarness

ADMIN_KEY = "adm-3f9c1e27b5d84a60"
INFERENCE_KEY = "inf-7a2d94c0e1b85f36"
CLUSTER_TOKEN = "clu-1c6e8a3f0b5d2947"
SESSION = "/router/v1/ui/session"


def secure_settings(h: RouterHarness, **ui: Any) -> Settings:
    data = h.settings().model_dump()
    data["security"] = {"profile": "secure"}
    data["auth"] = {"admin_keys": [ADMIN_KEY], "inference_keys": [INFERENCE_KEY]}
    data["cluster"] = {**data["cluster"], "token": CLUSTER_TOKEN}
    data["ui"] = {**data["ui"], **ui}
    return Settings.model_validate(data)


async def start_secure(h: RouterHarness, **ui: Any) -> httpx.AsyncClient:
    return await h.start(secure_settings(h, **ui))


def session_cookie(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    """The session cookie's value and its attributes, from the raw Set-Cookie header."""
    headers = response.headers.get_list("set-cookie")
    assert len(headers) == 1, headers
    jar: SimpleCookie = SimpleCookie()
    jar.load(headers[0])
    morsel = jar[COOKIE_NAME]
    lowered = headers[0].lower()
    flags = {"httponly": "httponly" in lowered, "secure": "; secure" in lowered}
    return morsel.value, {**dict(morsel.items()), **flags}


async def sign_in(client: httpx.AsyncClient) -> tuple[dict[str, str], str]:
    """(headers that carry the cookie, the CSRF token)."""
    response = await client.post(SESSION, json={"key": ADMIN_KEY})
    assert response.status_code == 200, response.text
    client.cookies.clear()  # the tests send Cookie themselves, or deliberately do not
    token, _ = session_cookie(response)
    return {"Cookie": f"{COOKIE_NAME}={token}"}, response.json()["csrf_token"]


async def test_state_before_sign_in_says_login_required(harness: RouterHarness) -> None:
    client = await start_secure(harness)
    response = await client.get(SESSION)
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "no-store"
    body = response.json()
    assert body == {
        "authenticated": False,
        "login_required": True,
        "profile": "secure",
        "csrf_token": None,
        "expires_at": None,
        "trace_url": None,  # observability.trace_url: the WebUI links trace ids with it
        "node": {
            "node_id": "local",
            "version": body["node"]["version"],
            "bind": "127.0.0.1:8080",
            "profile": "secure",
        },
    }
    assert isinstance(body["node"]["version"], str) and body["node"]["version"]


async def test_sign_in_sets_a_strict_http_only_cookie(harness: RouterHarness) -> None:
    client = await start_secure(harness)
    before = time.time()
    response = await client.post(SESSION, json={"key": ADMIN_KEY})
    assert response.status_code == 200, response.text
    token, attrs = session_cookie(response)
    assert len(token) >= 40
    assert attrs["path"] == "/router/"
    assert attrs["samesite"] == "Strict"
    assert attrs["httponly"] is True and attrs["secure"] is False
    assert int(attrs["max-age"]) == 86400
    body = response.json()
    assert body["authenticated"] is True and body["login_required"] is True
    assert isinstance(body["csrf_token"], str) and len(body["csrf_token"]) >= 40
    assert before + 86400 - 5 <= body["expires_at"] <= time.time() + 86400 + 5
    assert ADMIN_KEY not in response.text and token not in response.text
    # The cookie alone tells GET /ui/session who is signed in, with the same CSRF token.
    again = await client.get(SESSION, headers={"Cookie": f"{COOKIE_NAME}={token}"})
    assert again.json()["authenticated"] is True
    assert again.json()["csrf_token"] == body["csrf_token"]


async def test_cookie_secure_setting_adds_secure(harness: RouterHarness) -> None:
    client = await start_secure(harness, cookie_secure=True)
    response = await client.post(SESSION, json={"key": ADMIN_KEY})
    assert session_cookie(response)[1]["secure"] is True


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"key": "wrong-0000000000000000"}, 401),
        ({"key": INFERENCE_KEY}, 403),
        ({"key": CLUSTER_TOKEN}, 403),
        ({"key": ""}, 400),
        ({}, 400),
    ],
)
async def test_only_an_admin_key_signs_in(
    harness: RouterHarness, body: dict[str, str], status: int
) -> None:
    client = await start_secure(harness)
    response = await client.post(SESSION, json=body)
    assert response.status_code == status, response.text
    assert "set-cookie" not in response.headers
    assert set(response.json()["error"]) >= {"message", "type"}  # the control surface's shape
    assert len(harness.app[AUTH].sessions or ()) == 0  # type: ignore[index]


async def test_the_cookie_opens_admin_routes_and_unsafe_ones_need_csrf(
    harness: RouterHarness,
) -> None:
    client = await start_secure(harness)
    assert (await client.get("/router/v1/status")).status_code == 401
    cookie, csrf = await sign_in(client)
    assert (await client.get("/router/v1/status", headers=cookie)).status_code == 200
    assert (await client.get("/router/v1/site/load-errors", headers=cookie)).status_code == 200
    unload = {"target": "all"}
    refused = await client.post("/router/v1/unload", headers=cookie, json=unload)
    assert refused.status_code == 403
    assert "X-CSRF-Token" in refused.json()["error"]["message"]
    wrong = {**cookie, "X-CSRF-Token": csrf[:-1] + ("A" if csrf[-1] != "A" else "B")}
    assert (await client.post("/router/v1/unload", headers=wrong, json=unload)).status_code == 403
    right = {**cookie, "X-CSRF-Token": csrf}
    assert (await client.post("/router/v1/unload", headers=right, json=unload)).status_code == 200
    # The cookie never stands in for the cluster token.
    assert (await client.get("/router/v1/node/models", headers=cookie)).status_code == 401


async def test_bearer_keys_work_beside_and_before_the_cookie(harness: RouterHarness) -> None:
    client = await start_secure(harness)
    cookie, _ = await sign_in(client)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert (await client.post("/router/v1/unload", headers=admin, json={})).status_code == 200
    # A key header wins over the cookie: an inference key stays an inference key.
    inference = {**cookie, "Authorization": f"Bearer {INFERENCE_KEY}"}
    assert (await client.get("/router/v1/status", headers=inference)).status_code == 403


async def test_sign_out_ends_the_session_server_side(harness: RouterHarness) -> None:
    client = await start_secure(harness)
    cookie, csrf = await sign_in(client)
    assert (await client.delete(SESSION, headers=cookie)).status_code == 403  # no CSRF token
    response = await client.delete(SESSION, headers={**cookie, "X-CSRF-Token": csrf})
    assert response.status_code == 204
    cleared = response.headers["set-cookie"].lower()
    assert f"{COOKIE_NAME}=" in cleared and "max-age=0" in cleared and "path=/router/" in cleared
    # Replaying the old cookie opens nothing.
    status = await client.get("/router/v1/status", headers=cookie)
    assert status.status_code == 401
    assert "sign in again" in status.json()["error"]["message"]
    assert (await client.get(SESSION, headers=cookie)).json()["authenticated"] is False


async def test_an_expired_session_is_refused(harness: RouterHarness) -> None:
    client = await start_secure(harness, session_ttl="1h")
    cookie, _ = await sign_in(client)
    assert (await client.get("/router/v1/status", headers=cookie)).status_code == 200
    sessions = harness.app[AUTH].sessions  # type: ignore[index]
    assert sessions is not None
    sessions.clock = lambda: time.monotonic() + 3601  # an hour later
    assert (await client.get("/router/v1/status", headers=cookie)).status_code == 401
    assert (await client.get(SESSION, headers=cookie)).json()["authenticated"] is False


async def test_event_stream_opens_with_the_cookie(harness: RouterHarness) -> None:
    """What an EventSource does: a plain GET that carries the cookie and no header key."""
    client = await start_secure(harness)
    cookie, _ = await sign_in(client)
    async with client.stream("GET", "/router/v1/events", headers=cookie) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        first = await anext(response.aiter_bytes())
        assert first  # the stream's opening lines arrive without any event being published
    async with client.stream("GET", "/router/v1/events") as response:
        assert response.status_code == 401


async def test_failed_sign_ins_are_limited_per_address(harness: RouterHarness) -> None:
    client = await start_secure(harness, login_failures_per_minute=2)
    for _ in range(2):
        wrong = await client.post(SESSION, json={"key": "wrong-0000000000000000"})
        assert wrong.status_code == 401
    limited = await client.post(SESSION, json={"key": ADMIN_KEY})
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["Retry-After"]) <= 60


async def test_trusted_lan_opens_without_sign_in(harness: RouterHarness) -> None:
    client = await harness.start()  # the harness's default profile is trusted_lan
    body = (await client.get(SESSION)).json()
    assert body["authenticated"] is True and body["login_required"] is False
    assert body["profile"] == "trusted_lan" and body["csrf_token"] is None
    signed = await client.post(SESSION, json={"key": "anything-at-all-here"})
    assert signed.status_code == 200 and "set-cookie" not in signed.headers
    assert (await client.post("/router/v1/unload", json={})).status_code == 200
    # The Origin rule still holds for the WebUI's own routes.
    foreign = await client.post(SESSION, json={"key": "x"}, headers={"Origin": "http://evil.test"})
    assert foreign.status_code == 403


# --- the session table and the limiter, without sockets -----------------------------------


def test_sessions_are_bounded_and_expire() -> None:
    now = [1000.0]
    sessions = UiSessions(ttl=60, max_sessions=2, clock=lambda: now[0], wall=lambda: 5.0)
    first, _ = sessions.create()
    now[0] += 1
    second, session = sessions.create()
    assert session.expires_at == 65.0
    now[0] += 1
    third, _ = sessions.create()  # full: the one expiring first goes
    assert len(sessions) == 2
    assert sessions.lookup(first) is None
    assert sessions.lookup(second) is not None and sessions.lookup(third) is not None
    assert first not in repr(vars(sessions))  # only digests are kept
    now[0] += 60
    assert sessions.lookup(second) is None and len(sessions) == 1
    assert sessions.end(third) and not sessions.end(third) and not sessions.end(None)


def test_csrf_token_check() -> None:
    _, session = UiSessions(60, 4).create()
    assert session.csrf_ok(session.csrf_token)
    assert not session.csrf_ok(None) and not session.csrf_ok("")
    assert not session.csrf_ok(session.csrf_token + "x")


def test_login_limiter_window() -> None:
    now = [0.0]
    limiter = LoginLimiter(2, clock=lambda: now[0])
    limiter.failed("10.0.0.1")
    now[0] = 10
    limiter.failed("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 50
    assert limiter.retry_after("10.0.0.2") == 0
    now[0] = 60.5  # the first failure left the window
    assert limiter.retry_after("10.0.0.1") == 0
    assert LoginLimiter(0).retry_after("x") == 0
