"""Backend WebUIs on a real router with fake backends: the catalog and session routes, the
ticket flow between the two listeners, the proxy's refusals, headers and streaming."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from router.webuis import COOKIE, TICKET_PARAM, TokenStore
from tests.support.harness import RouterHarness, chat, read_sse
from tests.support.webui_helpers import (
    ADMIN,
    INFERENCE,
    UiListener,
    enable,
    open_ui,
    secure,
    start_ui,
    ticket_url,
    ui_fixture,
)

SITE = "/router/v1/site/webuis"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
async def uis(harness: RouterHarness) -> AsyncIterator[list[UiListener]]:
    async for started in ui_fixture(harness):
        yield started


async def started(
    h: RouterHarness, uis: list[UiListener], *, secure_mode: bool = True
) -> UiListener:
    h.model("chat")
    h.model("other")
    h.model("ears", whispermodel="ears.bin")
    settings = h.settings()
    await h.start(secure(settings) if secure_mode else settings)
    uis.append(await start_ui(h))
    return uis[-1]


async def load(h: RouterHarness, kind: str, model_id: str) -> httpx.Response:
    assert h.client is not None
    return await h.client.post(
        f"{SITE}/load", json={"id": kind, "model_id": model_id}, headers=AUTH
    )


# ---- site routes --------------------------------------------------------------------------------


async def test_catalog_session_and_load(harness: RouterHarness, uis: list[UiListener]) -> None:
    h = harness
    await started(h, uis)
    client = h.client
    assert client is not None
    r = await client.get(SITE, headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list"
    assert [e["id"] for e in body["data"]] == ["llama", "whispercpp"]
    llama = body["data"][0]
    assert (llama["enabled"], llama["active"], llama["active_model_id"]) == (False, False, None)
    assert [m["model_id"] for m in llama["compatible_models"]] == ["chat", "other"]

    assert (
        await client.post(f"{SITE}/session", json={"id": "llama", "enabled": True}, headers=AUTH)
    ).json() == {"ok": True, "id": "llama", "enabled": True}
    assert h.runtimes.views() == ()  # enabling starts nothing
    r = await load(h, "llama", "other")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "ok": True,
        "id": "llama",
        "url": "/router/webuis/llama/",
        "model_id": "other",
        "image_id": None,
    }
    llama = (await client.get(SITE, headers=AUTH)).json()["data"][0]
    assert (llama["enabled"], llama["active"], llama["active_model_id"]) == (True, True, "other")


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("session", {"id": "nope", "enabled": True}, 404),
        ("session", {"id": "kobold-lite", "enabled": True}, 404),  # no compatible config
        ("session", {"id": "llama", "enabled": "yes"}, 400),
        ("session", {"enabled": True}, 400),
        ("load", {"id": "llama"}, 400),  # two compatible models: name one
        ("load", {"id": "llama", "model_id": "ears"}, 409),  # not compatible with llama
        ("load", {"id": "llama", "model_id": 3}, 400),
        ("load", {"id": "whispercpp", "node_id": "elsewhere"}, 404),
        ("nothing", {}, 404),
    ],
)
async def test_site_refusals(
    harness: RouterHarness, uis: list[UiListener], path: str, body: dict[str, object], status: int
) -> None:
    await started(harness, uis)
    assert harness.client is not None
    r = await harness.client.post(f"{SITE}/{path}", json=body, headers=AUTH)
    assert r.status_code == status, r.text
    assert "error" in r.json()


async def test_site_routes_need_an_admin_key(harness: RouterHarness, uis: list[UiListener]) -> None:
    await started(harness, uis)
    client = harness.client
    assert client is not None
    assert (await client.get(SITE)).status_code == 401
    assert (
        await client.get(SITE, headers={"Authorization": f"Bearer {INFERENCE}"})
    ).status_code == 403
    assert (await client.get("/router/webuis/llama/")).status_code == 401
    inference = {"Authorization": f"Bearer {INFERENCE}"}
    assert (await client.get("/router/webuis/llama/", headers=inference)).status_code == 403


# ---- the ticket flow ------------------------------------------------------------------------------


async def test_ticket_cookie_and_the_backend_page(
    harness: RouterHarness, uis: list[UiListener]
) -> None:
    h = harness
    ui = await started(h, uis)
    await enable(h, "llama")
    assert (await load(h, "llama", "chat")).status_code == 200
    location = await ticket_url(h, "llama", "assets/app.js?v=2", **AUTH)
    assert location.startswith(str(ui.server.make_url("/router/webuis/llama/assets/app.js")))
    assert f"{TICKET_PARAM}=" in location and "v=2" in location

    exchanged = await ui.client.get(location)
    assert exchanged.status_code == 302
    assert exchanged.headers["Location"] == "/router/webuis/llama/assets/app.js?v=2"
    cookie = exchanged.headers["Set-Cookie"]
    for part in (
        f"{COOKIE}=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/router/webuis/llama/",
        "Max-Age=900",
    ):
        assert part in cookie, cookie
    script = await ui.client.get(exchanged.headers["Location"])
    assert script.status_code == 200 and script.text == "console.log('fake');"

    page = await ui.client.get("/router/webuis/llama/")
    assert page.status_code == 200 and "fake llamacpp ui" in page.text
    # The backend's own cookie, CORS and framing rule never reach the browser; ours do.
    assert "backend_session" not in page.headers.get("Set-Cookie", "")
    assert "Access-Control-Allow-Origin" not in page.headers
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert "connect-src 'self'" in page.headers["Content-Security-Policy"]
    # The ticket was spent by the exchange: a second use is refused.
    async with httpx.AsyncClient() as browser:
        again = await browser.get(location)
    assert again.status_code == 401, again.text
    assert again.headers["X-Frame-Options"] == "DENY"  # errors carry the rules too


async def test_expired_and_cross_kind_tickets_and_cookies(
    harness: RouterHarness, uis: list[UiListener]
) -> None:
    h = harness
    ui = await started(h, uis)
    await enable(h, "llama")
    await enable(h, "whispercpp")
    now = [1000.0]
    ui.state.tickets = TokenStore(60, 16, single_use=True, clock=lambda: now[0])
    late = await ticket_url(h, "llama", **AUTH)
    now[0] += 61
    assert (await ui.client.get(late)).status_code == 401

    # A llama ticket does not open whispercpp (and is spent trying).
    llama_ticket = (await ticket_url(h, "llama", **AUTH)).split(f"{TICKET_PARAM}=")[1]
    wrong = await ui.client.get(f"/router/webuis/whispercpp/?{TICKET_PARAM}={llama_ticket}")
    assert wrong.status_code == 401
    assert (
        await ui.client.get(f"/router/webuis/llama/?{TICKET_PARAM}={llama_ticket}")
    ).status_code == 401

    # A llama session cookie does not open whispercpp, even sent on purpose to its path.
    assert (await load(h, "whispercpp", "ears")).status_code == 200
    assert (await open_ui(h, ui, "llama")).status_code == 503  # no llama runtime yet
    session = next(c.value for c in ui.client.cookies.jar if c.name == COOKIE)
    direct = httpx.AsyncClient(base_url=str(ui.server.make_url("")))
    try:
        forged = await direct.get(
            "/router/webuis/whispercpp/", headers={"Cookie": f"{COOKIE}={session}"}
        )
        assert forged.status_code == 401, forged.text
        assert (await direct.get("/router/webuis/whispercpp/")).status_code == 401
        # A ticket is accepted on GET only.
        ticket = (await ticket_url(h, "whispercpp", **AUTH)).split(f"{TICKET_PARAM}=")[1]
        posted = await direct.post(f"/router/webuis/whispercpp/inference?{TICKET_PARAM}={ticket}")
        assert posted.status_code == 400
    finally:
        await direct.aclose()
    page = await open_ui(h, ui, "whispercpp")
    assert page.status_code == 200 and "fake whisper ui" in page.text


async def test_disabled_missing_slash_and_no_runtime(
    harness: RouterHarness, uis: list[UiListener]
) -> None:
    h = harness
    ui = await started(h, uis, secure_mode=False)
    assert h.client is not None
    # Disabled: 404 on both listeners, and no ticket is minted.
    off = await h.client.get("/router/webuis/llama/")
    assert off.status_code == 404 and "not enabled" in off.json()["error"]["message"]
    assert (await ui.client.get("/router/webuis/llama/")).status_code == 404
    assert (await ui.client.get("/router/webuis/nope/")).status_code == 404
    assert (await ui.client.get("/v1/models")).status_code == 404
    await enable(h, "llama")
    bare = await ui.client.get("/router/webuis/llama?x=1")
    assert (bare.status_code, bare.headers["Location"]) == (308, "/router/webuis/llama/?x=1")
    # trusted_lan: no ticket needed; with no runtime the 503 names what to load.
    missing = await ui.client.get("/router/webuis/llama/")
    assert missing.status_code == 503
    message = missing.json()["error"]["message"]
    assert "load one of: chat, other" in message and "/router/v1/site/webuis/load" in message
    assert h.runtimes.views() == ()  # a UI request never loads a model


# ---- the proxy ------------------------------------------------------------------------------------


async def test_allow_list_and_origin_refusals(
    harness: RouterHarness, uis: list[UiListener]
) -> None:
    h = harness
    ui = await started(h, uis, secure_mode=False)
    await enable(h, "llama")
    await enable(h, "whispercpp")
    assert (await load(h, "llama", "chat")).status_code == 200
    assert (await load(h, "whispercpp", "ears")).status_code == 200
    for method, path in (
        ("POST", "/router/webuis/whispercpp/load"),
        ("GET", "/router/webuis/whispercpp/load"),
        ("POST", "/router/webuis/llama/props"),
        ("POST", "/router/webuis/llama/slots/0?action=save"),
        ("PUT", "/router/webuis/llama/v1/chat/completions"),
    ):
        r = await ui.client.request(method, path, content=b"{}")
        assert r.status_code == 403, (method, path, r.text)
    foreign = await ui.client.post(
        "/router/webuis/llama/completion",
        json={"prompt": "hi"},
        headers={"Origin": "http://evil.example"},
    )
    assert foreign.status_code == 403
    same = await ui.client.post(
        "/router/webuis/llama/completion",
        json={"prompt": "hi"},
        headers={"Origin": str(ui.server.make_url("")).rstrip("/")},
    )
    assert same.status_code == 200, same.text
    rebinding = await ui.client.get("/router/webuis/llama/", headers={"Host": "attacker.example"})
    assert rebinding.status_code == 403


async def test_headers_redirects_and_streams(harness: RouterHarness, uis: list[UiListener]) -> None:
    h = harness
    ui = await started(h, uis)
    await enable(h, "llama")
    assert (await load(h, "llama", "chat")).status_code == 200
    assert (await open_ui(h, ui, "llama")).status_code == 200
    sent = {
        "Authorization": f"Bearer {ADMIN}",
        "X-Forwarded-For": "10.0.0.9",
        "X-Forwarded-Host": "evil",
        "Forwarded": "for=10.0.0.9",
        "X-Real-IP": "10.0.0.9",
        "Proxy-Secret": "x",
        "X-Kept": "yes",
    }
    echo = await ui.client.get("/router/webuis/llama/ui-echo?a=1&b=%20", headers=sent)
    assert echo.status_code == 200, echo.text
    seen = {k.lower() for k in echo.json()["headers"]}
    assert "x-kept" in seen and echo.json()["query"] == "a=1&b= "
    for name in (
        "authorization",
        "cookie",
        "x-forwarded-for",
        "x-forwarded-host",
        "forwarded",
        "x-real-ip",
        "proxy-secret",
    ):
        assert name not in seen, name

    for target, expected in (
        ("/ui-landing?x=1", "/router/webuis/llama/ui-landing?x=1"),
        ("https://example.org/away", "https://example.org/away"),
    ):
        r = await ui.client.get("/router/webuis/llama/ui-redirect", params={"to": target})
        assert (r.status_code, r.headers["Location"]) == (302, expected)
    own = await ui.client.get("/router/webuis/llama/ui-redirect")  # absolute, the backend's port
    assert own.headers["Location"] == "/router/webuis/llama/ui-landing?x=1"

    async with ui.client.stream(
        "POST", "/router/webuis/llama/v1/chat/completions", json=chat("chat", stream=True)
    ) as r:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        events = await read_sse(r)
    data = [e.data for e in events]
    assert data[-1] == "[DONE]" and len(data) >= 3
    assert json.loads(data[0])["object"] == "chat.completion.chunk"


async def test_an_unload_waits_for_a_running_ui_stream(
    harness: RouterHarness, uis: list[UiListener]
) -> None:
    h = harness
    h.faults["llamacpp"] = "--tokens 20 --token-rate 20"
    ui = await started(h, uis, secure_mode=False)
    await enable(h, "llama")
    assert (await load(h, "llama", "chat")).status_code == 200
    body = chat("chat", stream=True)
    async with ui.client.stream("POST", "/router/webuis/llama/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        (view,) = h.runtimes.views()
        assert view.leases == 1  # the UI request holds a lease while it streams
        assert h.client is not None
        unload = asyncio.create_task(h.client.post("/router/v1/unload", json={"lane": "text"}))
        await asyncio.sleep(0.2)
        assert not unload.done()
        events = await read_sse(r)
    assert events[-1].data == "[DONE]"
    assert (await asyncio.wait_for(unload, 30)).status_code == 200
    assert h.runtimes.views() == ()


async def test_root_calls_are_bridged_by_the_referer(
    harness: RouterHarness, uis: list[UiListener]
) -> None:
    """UIs that build API URLs from the origin call `/completion`, not the prefixed path."""
    h = harness
    ui = await started(h, uis)
    await enable(h, "llama")
    await enable(h, "whispercpp")
    assert (await load(h, "llama", "chat")).status_code == 200
    assert (await open_ui(h, ui, "llama")).status_code == 200
    origin = str(ui.server.make_url("")).rstrip("/")
    page = {"Referer": f"{origin}/router/webuis/llama/"}
    done = await ui.client.post("/completion", json={"prompt": "hi"}, headers=page)
    assert done.status_code == 200, done.text
    for headers, path, status in (
        ({}, "/completion", 404),  # no page named
        ({"Referer": "http://evil.example/router/webuis/llama/"}, "/completion", 404),
        ({"Referer": f"{origin}/router/v1/site/webuis"}, "/completion", 404),
        (page, "/assets/app.js", 403),  # static files are read under the prefix only
        (page, "/props", 403),  # POST /props is not an API call of the llama page
        ({"Referer": f"{origin}/router/webuis/whispercpp/"}, "/v1/audio/transcriptions", 401),
        ({"Referer": f"{origin}/router/webuis/whispercpp/"}, "/load", 401),
    ):
        method = "GET" if path.endswith(".js") else "POST"
        r = await ui.client.request(method, path, headers=headers, content=b"{}")
        assert r.status_code == status, (headers, path, r.text)
    # The bridge carries its own Path=/ cookie: without it the call is refused.
    bare = httpx.AsyncClient(base_url=origin)
    try:
        r = await bare.post("/completion", json={"prompt": "hi"}, headers=page)
        assert r.status_code == 401
    finally:
        await bare.aclose()


async def test_koboldcpp_interfaces_share_one_runtime(
    harness: RouterHarness, uis: list[UiListener]
) -> None:
    h = harness
    h.model("kob", mode="kobold")
    await h.start(secure(h.settings()))
    uis.append(ui := await start_ui(h))
    assert h.client is not None
    listed = (await h.client.get(SITE, headers=AUTH)).json()["data"]
    assert [e["id"] for e in listed] == ["kobold-lite", "kobold-lcpp"]
    await enable(h, "kobold-lite")
    await enable(h, "kobold-lcpp")
    assert (await load(h, "kobold-lcpp", "kob")).status_code == 200
    lcpp = await open_ui(h, ui, "kobold-lcpp", "index.html")
    assert lcpp.status_code == 200 and "<p>/lcpp/index.html</p>" in lcpp.text
    lite = await open_ui(h, ui, "kobold-lite")
    assert lite.status_code == 200 and "<p>/</p>" in lite.text
    # Lite calls the API from the origin's root; the Referer names the page.
    origin = str(ui.server.make_url("")).rstrip("/")
    r = await ui.client.post(
        "/api/v1/generate",
        json={"prompt": "hi", "max_length": 2},
        headers={"Referer": f"{origin}/router/webuis/kobold-lite/"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["completion_tokens"] == 2
    shutdown = await ui.client.post("/router/webuis/kobold-lite/api/extra/shutdown", json={})
    assert shutdown.status_code == 403
    assert len(h.runtimes.views()) == 1


async def test_the_listener_is_reported_off(harness: RouterHarness, tmp_path: Path) -> None:
    h = harness
    h.model("chat")
    client = await h.start()
    await enable(h, "llama")
    r = await client.get("/router/webuis/llama/")
    assert r.status_code == 503 and "server.backend_ui_bind" in r.json()["error"]["message"]
