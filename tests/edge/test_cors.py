"""`server.cors_origins`: preflights and CORS headers on the model APIs for listed origins only;
every other origin stays refused, and control, site, node and WebUI routes never answer CORS."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from router.config import Settings, SettingsError, load_settings
from router.edge.cors import CorsPolicy, allowed_headers
from tests.support.harness import RouterHarness, chat

pytestmark = pytest.mark.timeout(60)

LISTED = "http://localhost:5173"
FOREIGN = "http://evil.example:8000"
KEY = "c0rs-test-inference-9f3a1b"
ADMIN = "c0rs-test-admin-77e2d0"


def with_cors(h: RouterHarness, origins: list[str], secure: bool = False) -> Settings:
    settings = h.settings()
    server = settings.server.model_copy(update={"cors_origins": tuple(origins)})
    update: dict[str, object] = {"server": server}
    if secure:
        update["security"] = settings.security.model_copy(update={"profile": "secure"})
        update["auth"] = settings.auth.model_copy(
            update={"inference_keys": (KEY,), "admin_keys": (ADMIN,)}
        )
    return settings.model_copy(update=update)


def preflight(origin: str, method: str = "POST", headers: str = "authorization,content-type"):
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": headers,
    }


# ---- pure ------------------------------------------------------------------------------------


def test_policy_matches_exact_origins_only() -> None:
    policy = CorsPolicy((LISTED,))
    assert policy.allows(LISTED) and policy.allows(LISTED + "/")
    assert not policy.allows("http://localhost:5174") and not policy.allows("null")
    assert not policy.allows(None) and not CorsPolicy(()).enabled
    assert CorsPolicy(("*",)).allows(FOREIGN)


def test_allowed_headers_always_include_authorization() -> None:
    assert allowed_headers(None) == "Authorization, Content-Type"
    assert allowed_headers("x-stainless-os, authorization") == (
        "x-stainless-os, authorization, Content-Type"
    )


def test_origins_are_normalized_and_checked() -> None:
    server = Settings.model_validate(
        {"server": {"cors_origins": ["HTTP://LocalHost:80/", "https://app.lan:443", "*"]}}
    ).server
    assert server.cors_origins == ("http://localhost", "https://app.lan", "*")
    for bad in ("localhost:3000", "http://a/path", "ftp://a", "http://u:p@a"):
        with pytest.raises(ValidationError):
            Settings.model_validate({"server": {"cors_origins": [bad]}})


def test_wildcard_needs_the_secure_profile_with_keys(tmp_path: Path) -> None:
    (tmp_path / "kcpps").mkdir()
    config = tmp_path / "router.yaml"
    config.write_text("security:\n  profile: trusted_lan\nserver:\n  cors_origins: ['*']\n")
    with pytest.raises(SettingsError, match=r"server\.cors_origins\[0\].*secure"):
        load_settings(config, env={})
    config.write_text("server:\n  cors_origins: ['*']\n")  # secure, but no keys
    with pytest.raises(SettingsError, match="inference_keys"):
        load_settings(config, env={})
    config.write_text(f"server:\n  cors_origins: ['*']\nauth:\n  inference_keys: [{KEY}]\n")
    assert load_settings(config, env={}).server.cors_origins == ("*",)


# ---- through the router ----------------------------------------------------------------------


async def test_listed_origin_gets_preflight_and_headers(harness: RouterHarness) -> None:
    harness.model("alpha")
    client = await harness.start(with_cors(harness, [LISTED], secure=True))
    r = await client.options("/v1/chat/completions", headers=preflight(LISTED))
    assert r.status_code == 204, r.text
    assert r.headers["access-control-allow-origin"] == LISTED
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    assert "Origin" in r.headers["vary"]
    auth = {"Origin": LISTED, "Authorization": f"Bearer {KEY}"}
    r = await client.post("/v1/chat/completions", json=chat("alpha"), headers=auth)
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == LISTED
    assert "Origin" in r.headers.get("vary", "")
    # The page's script may read how long the request queued (browsers hide other headers).
    exposed = [h.strip() for h in r.headers["access-control-expose-headers"].split(",")]
    assert "X-Tensors-Queue-Wait-Ms" in exposed and "X-Tensors-Queue-Wait-Ms" in r.headers
    # An error (no key) is readable by the page too.
    r = await client.post("/v1/chat/completions", json=chat("alpha"), headers={"Origin": LISTED})
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == LISTED
    r = await client.get("/v1/models", headers=auth)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == LISTED


async def test_unlisted_origins_and_admin_routes_get_no_cors(harness: RouterHarness) -> None:
    harness.model("alpha")
    client = await harness.start(with_cors(harness, [LISTED], secure=True))
    r = await client.options("/v1/chat/completions", headers=preflight(FOREIGN))
    assert r.status_code != 204 and "access-control-allow-origin" not in r.headers
    auth = {"Authorization": f"Bearer {KEY}"}
    r = await client.post(
        "/v1/chat/completions", json=chat("alpha"), headers={**auth, "Origin": FOREIGN}
    )
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    for path, method in (
        ("/router/v1/load", "POST"),
        ("/router/v1/site/inventory", "GET"),
        ("/router/v1/node/models", "GET"),
        ("/router/ui/", "GET"),
    ):
        r = await client.options(path, headers=preflight(LISTED, method))
        assert r.status_code != 204 and "access-control-allow-origin" not in r.headers, path
    r = await client.post(
        "/router/v1/load",
        json={"model": "alpha"},
        headers={"Authorization": f"Bearer {ADMIN}", "Origin": LISTED},
    )
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


async def test_without_the_setting_nothing_changes(harness: RouterHarness) -> None:
    harness.model("alpha")
    client = await harness.start()
    r = await client.options("/v1/chat/completions", headers=preflight(LISTED))
    assert r.status_code == 405
    r = await client.post("/v1/chat/completions", json=chat("alpha"), headers={"Origin": LISTED})
    assert r.status_code == 403
