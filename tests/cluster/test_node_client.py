"""The node client's two modes against a real peer on loopback: the buffered one reads a large
answer sent in pieces to its end within one total deadline; the streamed one hands each piece
on as it comes and bounds every wait for bytes; a peer outside the allow-list is never called;
a redirect is never followed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from router.cluster import NodeClient
from router.cluster.urls import AllowList
from router.errors import BadGateway, ClusterError, GatewayTimeout
from tests.support.harness import free_port

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BIG = bytes(range(256)) * 1600  # 400 KB


class Peer:
    def __init__(self) -> None:
        self.app = web.Application()
        self.calls = 0
        self.base = ""
        self.routes: dict[str, Handler] = {}  # added while it runs (aiohttp's table is frozen)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        return await self.routes[request.path](request)


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    peer = Peer()
    runner = web.AppRunner(peer.app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    peer.base = f"http://127.0.0.1:{port}"
    yield peer
    await runner.cleanup()


def client_for(session: aiohttp.ClientSession, peer: Peer, total: float = 30.0) -> NodeClient:
    return NodeClient(session, "secret", AllowList([peer.base]), total)


async def pieces(request: web.Request, body: bytes, size: int, pause: float) -> web.StreamResponse:
    out = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    await out.prepare(request)
    for start in range(0, len(body), size):
        await out.write(body[start : start + size])
        await asyncio.sleep(pause)
    await out.write_eof()
    return out


async def test_buffered_reads_a_large_answer_sent_in_pieces_whole(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    seen: list[str] = []

    async def big(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        return await pieces(request, BIG, 40_000, 0.05)

    peer.routes["/router/v1/node/big"] = big
    reply = await client_for(session, peer).fetch("GET", peer.base, "/router/v1/node/big")
    assert reply.status == 200 and reply.body == BIG
    assert seen == ["Bearer secret"]


async def test_buffered_json_call_of_a_large_object_in_pieces(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    doc = json.dumps({"rows": [BIG[:1000].hex()] * 200}).encode()
    assert len(doc) > 300_000

    async def big(request: web.Request) -> web.StreamResponse:
        return await pieces(request, doc, 30_000, 0.03)

    peer.routes["/router/v1/node/doc"] = big
    answer = await client_for(session, peer).call("GET", peer.base, "/router/v1/node/doc")
    assert len(answer["rows"]) == 200


async def test_buffered_refuses_more_than_its_cap(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    async def big(request: web.Request) -> web.StreamResponse:
        return await pieces(request, BIG, 40_000, 0.0)

    peer.routes["/router/v1/node/big"] = big
    client = client_for(session, peer)
    with pytest.raises(BadGateway, match="more than 100000 bytes"):
        await client.fetch("GET", peer.base, "/router/v1/node/big", cap=100_000)


async def test_buffered_total_deadline_fires_while_bytes_still_come(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        return await pieces(request, BIG, 1000, 0.1)  # 40 s in all, never idle for long

    peer.routes["/router/v1/node/slow"] = slow
    client = client_for(session, peer, total=0.5)
    with pytest.raises(GatewayTimeout, match="did not answer"):
        await client.fetch("GET", peer.base, "/router/v1/node/slow")


async def test_streamed_hands_on_each_piece_as_it_comes(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    got_first = asyncio.Event()

    async def chat(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(b"data: one\n\n")
        # The second piece only once the caller holds the first: a client that buffered
        # would wait here for ever (the test's bound ends it).
        await got_first.wait()
        await out.write(b"data: two\n\n")
        await out.write_eof()
        return out

    peer.routes["/router/v1/node/chat"] = chat
    client = client_for(session, peer)

    async def relay() -> list[bytes]:
        received: list[bytes] = []
        upstream = await client.stream("POST", peer.base, "/router/v1/node/chat", data=b"{}")
        async with upstream:
            assert upstream.status == 200
            assert upstream.headers["Content-Type"] == "text/event-stream"
            async for chunk in upstream.chunks():
                received.append(chunk)
                got_first.set()
        return received

    received = await asyncio.wait_for(relay(), 20)
    assert received[0] == b"data: one\n\n"
    assert b"".join(received) == b"data: one\n\ndata: two\n\n"


async def test_streamed_has_no_total_deadline_only_an_idle_one(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    body = b"x" * 20

    async def trickle(request: web.Request) -> web.StreamResponse:
        return await pieces(request, body, 1, 0.1)  # 2 s in all, 0.1 s between bytes

    peer.routes["/router/v1/node/trickle"] = trickle
    client = client_for(session, peer, total=0.2)  # the control timeout does not apply
    upstream = await client.stream("GET", peer.base, "/router/v1/node/trickle", idle=1.5)
    async with upstream:
        assert b"".join([c async for c in upstream.chunks()]) == body


async def test_streamed_idle_deadline_fires_between_bytes(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    release = asyncio.Event()

    async def stall(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse()
        await out.prepare(request)
        await out.write(b"first")
        await release.wait()  # silent until the test ends
        return out

    peer.routes["/router/v1/node/stall"] = stall
    client = client_for(session, peer)
    upstream = await client.stream("GET", peer.base, "/router/v1/node/stall", idle=0.3)
    try:
        async with upstream:
            received = []
            with pytest.raises(GatewayTimeout, match="stopped sending"):
                async for chunk in upstream.chunks():
                    received.append(chunk)
            assert received == [b"first"]
    finally:
        release.set()


async def test_streamed_idle_deadline_covers_the_head(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    release = asyncio.Event()

    async def mute(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response()

    peer.routes["/router/v1/node/mute"] = mute
    client = client_for(session, peer)
    try:
        with pytest.raises(GatewayTimeout, match="did not answer in time"):
            await client.stream("GET", peer.base, "/router/v1/node/mute", idle=0.3)
    finally:
        release.set()


async def test_a_peer_outside_the_allow_list_is_never_called(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    async def ok(request: web.Request) -> web.StreamResponse:
        return web.json_response({})

    peer.routes["/router/v1/node/ok"] = ok
    client = NodeClient(session, "secret", AllowList(["http://127.0.0.1:1"]), 10.0)
    path = "/router/v1/node/ok"
    for attempt in (
        client.call("GET", peer.base, path),
        client.fetch("GET", peer.base, path),
        client.stream("GET", peer.base, path),
        client.websocket(peer.base, path, max_msg_size=1024),
    ):
        with pytest.raises(ClusterError) as refused:
            await attempt
        assert refused.value.code == "node_not_allowed"
    assert peer.calls == 0


async def test_a_redirect_is_never_followed(peer: Peer, session: aiohttp.ClientSession) -> None:
    async def moved(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/router/v1/node/elsewhere")

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        return web.json_response({"followed": True})

    peer.routes["/router/v1/node/moved"] = moved
    peer.routes["/router/v1/node/elsewhere"] = elsewhere
    client = client_for(session, peer)
    path = "/router/v1/node/moved"
    with pytest.raises(BadGateway, match="never follow redirects"):
        await client.call("GET", peer.base, path)
    assert (await client.fetch("GET", peer.base, path)).status == 302
    upstream = await client.stream("GET", peer.base, path)
    async with upstream:
        assert upstream.status == 302
    assert peer.calls == 3
