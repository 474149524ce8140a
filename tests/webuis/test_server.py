"""`serve()` starts the backend-UI listener beside the API (server.backend_ui_bind) and stops
it with the router; the redirect names the port it really got."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest
from aiohttp import web

from router import server
from router.app import create_app
from router.config import Settings
from tests.support.harness import RouterHarness, free_port


def free_pair() -> int:
    """A loopback port P with P + 1 free too, as far as can be told now (other jobs on the
    machine take ports as well: the test retries a few draws, not the router)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two adjacent free ports")


def with_server(base: Settings, **server_keys: Any) -> Settings:
    return base.model_copy(update={"server": base.server.model_copy(update=server_keys)})


async def run(settings: Settings) -> tuple[asyncio.Task[None], asyncio.Event, str]:
    stop, ready = asyncio.Event(), asyncio.Event()
    names: list[str] = []

    def on_ready(listening: list[str]) -> None:
        names.extend(listening)
        ready.set()

    task = asyncio.create_task(server.serve(settings, on_ready=on_ready, stop=stop))
    await asyncio.wait_for(ready.wait(), 60)
    return task, stop, names[0].removeprefix("http://")


async def open_llama(base: str) -> tuple[httpx.URL, httpx.Response]:
    """The management listener's redirect target, and the page at the end of the flow."""
    async with httpx.AsyncClient(base_url=f"http://{base}", timeout=30) as api:
        r = await api.post("/router/v1/site/webuis/session", json={"id": "llama", "enabled": True})
        assert r.status_code == 200, r.text
        redirect = await api.get("/router/webuis/llama/")
        assert redirect.status_code == 302, redirect.text
        location = httpx.URL(redirect.headers["Location"])
    async with httpx.AsyncClient(follow_redirects=True, timeout=30) as browser:
        return location, await browser.get(location)


async def test_the_listener_takes_port_plus_one_and_stops_with_the_router(
    harness: RouterHarness,
) -> None:
    harness.model("chat")
    port = free_pair()
    task, stop, base = await run(with_server(harness.settings(), bind=f"127.0.0.1:{port}"))
    try:
        location, page = await open_llama(base)
        assert (location.host, location.port) == ("127.0.0.1", port + 1)
        assert page.url.path == "/router/webuis/llama/" and not page.url.query
        assert page.status_code == 503 and "load one of: chat" in page.text
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port + 1), timeout=2).close()


async def test_auto_falls_back_to_a_free_port(harness: RouterHarness) -> None:
    harness.model("chat")
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))
        taken.listen()
        task, stop, base = await run(with_server(harness.settings(), bind=f"127.0.0.1:{port}"))
        try:
            location, page = await open_llama(base)
            assert location.port not in (port, port + 1)
            assert page.status_code == 503
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)


async def test_an_explicit_address_that_is_taken_fails_the_start(harness: RouterHarness) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ui = f"127.0.0.1:{taken.getsockname()[1]}"
        settings = with_server(
            harness.settings(), bind=f"127.0.0.1:{free_port()}", backend_ui_bind=ui
        )
        with pytest.raises(OSError):
            await asyncio.wait_for(server.serve(settings, stop=asyncio.Event()), 60)


def test_no_listener_when_off_or_on_a_slave(harness: RouterHarness) -> None:
    base = harness.settings()
    assert (
        server._backend_ui_runner(web.Application(), with_server(base, backend_ui_bind="off"))
        is None
    )
    cluster = base.cluster.model_copy(update={"role": "slave"})
    slave = base.model_copy(update={"cluster": cluster})
    assert server._backend_ui_runner(web.Application(), slave) is None
    assert server._backend_ui_runner(create_app(base), base) is not None
