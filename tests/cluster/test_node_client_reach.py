"""What the lending owner needs of the node client's streamed mode: a refused or lost
connection (PeerUnreachable) and a deadline (GatewayTimeout) are told apart from a malformed
answer; a caller's repeated header reaches the peer as it came; and the router's own listener
is the one address outside the configured nodes it may call (the master lending to its own
model)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict

from router.cluster import NodeClient, PeerUnreachable, listener_url
from router.cluster.urls import AllowList
from router.errors import BadGateway, ClusterError, GatewayTimeout
from tests.support.harness import free_port


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def test_a_refused_connection_is_unreachable(session: aiohttp.ClientSession) -> None:
    base = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client = NodeClient(session, "t", AllowList([base]), 10.0)
    with pytest.raises(PeerUnreachable):
        await client.stream("POST", base, "/router/v1/node/x", connect=5, idle=5)


async def test_a_connection_closed_mid_answer_is_unreachable(
    session: aiohttp.ClientSession,
) -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse()
        await out.prepare(request)
        await out.write(b"part")
        assert request.transport is not None
        request.transport.close()  # gone mid-answer, no terminating chunk
        return out

    app = web.Application()
    app.router.add_get("/router/v1/node/cut", cut)
    runner, base = await serve(app)
    try:
        client = NodeClient(session, "t", AllowList([base]), 10.0)
        upstream = await client.stream("GET", base, "/router/v1/node/cut", connect=5, idle=5)
        with pytest.raises(BadGateway) as caught:
            async with upstream:
                [chunk async for chunk in upstream.chunks()]
        # A payload cut short or a dropped socket: either way not a timeout.
        assert not isinstance(caught.value, GatewayTimeout)
    finally:
        await runner.cleanup()


async def test_an_idle_peer_is_a_timeout_not_unreachable(session: aiohttp.ClientSession) -> None:
    async def silent(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(5)
        return web.Response()

    app = web.Application()
    app.router.add_get("/router/v1/node/silent", silent)
    runner, base = await serve(app)
    try:
        client = NodeClient(session, "t", AllowList([base]), 10.0)
        with pytest.raises(GatewayTimeout):
            await client.stream("GET", base, "/router/v1/node/silent", connect=5, idle=0.3)
    finally:
        await runner.cleanup()


async def test_repeated_headers_reach_the_peer_and_the_token_is_added(
    session: aiohttp.ClientSession,
) -> None:
    seen: list[tuple[list[str], str]] = []

    async def echo(request: web.Request) -> web.StreamResponse:
        seen.append((request.headers.getall("Accept"), request.headers["Authorization"]))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/router/v1/node/echo", echo)
    runner, base = await serve(app)
    try:
        client = NodeClient(session, "secret", AllowList([base]), 10.0)
        headers: CIMultiDict[str] = CIMultiDict([("Accept", "a/b"), ("Accept", "c/d")])
        async with await client.stream("GET", base, "/router/v1/node/echo", headers=headers):
            pass
    finally:
        await runner.cleanup()
    assert seen == [(["a/b", "c/d"], "Bearer secret")]


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("0.0.0.0", 8080, "http://127.0.0.1:8080"),
        ("", 8080, "http://127.0.0.1:8080"),
        ("::", 9000, "http://[::1]:9000"),
        ("127.0.0.1", 9000, "http://127.0.0.1:9000"),
        ("::1", 80, "http://[::1]:80"),
    ],
)
def test_the_listener_url_is_a_loopback_base(host: str, port: int, url: str) -> None:
    assert listener_url(host, port) == url


def test_only_the_own_listener_is_allowed_beyond_the_configured_nodes() -> None:
    allowed = AllowList([listener_url("0.0.0.0", 8080)])
    client = NodeClient(None, "t", allowed, 10.0)  # type: ignore[arg-type]  # no call made
    assert client.url("http://127.0.0.1:8080", "/router/v1/node/x").endswith("/node/x")
    for other in ("http://127.0.0.1:8081", "http://10.0.0.5:8080", "http://localhost:8080"):
        with pytest.raises(ClusterError):
            client.url(other, "/router/v1/node/x")
