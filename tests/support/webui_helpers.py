"""The backend-UI listener beside a RouterHarness: its own real socket and origin, started
after the management app as `tensor-router start` does (router/server.py), and a browser-like
walk through the ticket redirect."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from aiohttp.test_utils import TestServer

from router.app import create_backend_ui_app
from router.appkeys import SETTINGS, WEBUIS
from router.config import Settings
from router.edge import listener
from router.webuis import Listener, WebUIs
from tests.support.harness import RouterHarness

ADMIN, INFERENCE = "adm-key-0123456789", "inf-key-0123456789"


def secure(settings: Settings) -> Settings:
    """The secure profile with one admin and one inference key."""
    auth = settings.auth.model_copy(update={"admin_keys": (ADMIN,), "inference_keys": (INFERENCE,)})
    profile = settings.security.model_copy(update={"profile": "secure"})
    return settings.model_copy(update={"auth": auth, "security": profile})


@dataclass
class UiListener:
    server: TestServer
    client: httpx.AsyncClient  # keeps the session cookie like a browser

    @property
    def state(self) -> WebUIs:
        return self.server.app[WEBUIS]

    async def close(self) -> None:
        await self.client.aclose()
        await self.server.close()


async def start_ui(h: RouterHarness) -> UiListener:
    assert h.app is not None, "start the router first"
    settings = h.app[SETTINGS]
    server = TestServer(
        create_backend_ui_app(h.app),
        host="127.0.0.1",
        handler_cancellation=True,
        **listener.runner_kwargs(settings),
    )
    await server.start_server()
    assert server.port is not None
    h.app[WEBUIS].listener = Listener("127.0.0.1", server.port)
    client = httpx.AsyncClient(base_url=str(server.make_url("")), timeout=30)
    return UiListener(server, client)


async def ui_fixture(h: RouterHarness) -> AsyncIterator[list[UiListener]]:
    """Body of a fixture: the test starts listeners into the list; closed before the router."""
    started: list[UiListener] = []
    try:
        yield started
    finally:
        for ui in started:
            await ui.close()


async def ticket_url(h: RouterHarness, kind: str, tail: str = "", **headers: Any) -> str:
    """What the management listener's redirect names: the listener URL with a ticket."""
    assert h.client is not None
    r = await h.client.get(f"/router/webuis/{kind}/{tail}", headers=headers)
    assert r.status_code == 302, r.text
    return r.headers["Location"]


async def open_ui(h: RouterHarness, ui: UiListener, kind: str, tail: str = "") -> httpx.Response:
    """Follow the ticket flow as a browser does; returns the final answer."""
    auth = {"Authorization": f"Bearer {ADMIN}"}
    location = await ticket_url(h, kind, tail, **auth)
    exchanged = await ui.client.get(location)
    assert exchanged.status_code == 302, exchanged.text
    return await ui.client.get(exchanged.headers["Location"])


async def enable(h: RouterHarness, kind: str, on: bool = True) -> None:
    assert h.client is not None
    r = await h.client.post(
        "/router/v1/site/webuis/session",
        json={"id": kind, "enabled": on},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 200, r.text
