"""Edge guards (router/edge/guards.py): CIDR, Host allowlist, size caps, Origin, connection level.

Middleware rules run through aiohttp's test client, behind the app's real error renderer
(`edge_errors`); the connection caps, header deadline and parser limits run against a real
listener (`capped_site`) with raw sockets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

from router import errors
from router.config import Settings
from router.config.schema import LimitsSection, SecuritySection, ServerSection
from router.domain import Role, Surface
from router.edge import edge_errors, read_body
from router.edge.connection_caps import ConnectionGuard
from router.edge.guards import (
    HostAllowlist,
    body_cap_for,
    edge_middlewares,
    peer_allowed,
    same_origin,
    split_host,
)
from router.edge.listener import MAX_URL_BYTES, capped_site, runner_kwargs


@dataclass(frozen=True)
class FakeRoute:
    template: str
    surface: Surface = Surface.OPENAI
    role: Role = Role.INFERENCE
    state_changing: bool = False
    origin_strict: bool = False
    handler: str = "proxy"


ROUTES = {
    "/health": FakeRoute("/health", Surface.META, Role.PUBLIC),
    "/": FakeRoute("/", Surface.SITE, Role.PUBLIC),
    "/v1/models": FakeRoute("/v1/models"),
    "/slow": FakeRoute("/slow"),
    "/v1/chat/completions": FakeRoute("/v1/chat/completions", state_changing=True),
    "/v1/realtime": FakeRoute("/v1/realtime"),
    "/api/chat": FakeRoute("/api/chat", Surface.OLLAMA, origin_strict=True, state_changing=True),
    "/api/tags": FakeRoute("/api/tags", Surface.OLLAMA, origin_strict=True),
    "/router/v1/unload": FakeRoute(
        "/router/v1/unload", Surface.CONTROL, Role.ADMIN, state_changing=True
    ),
    "/router/v1/shutdown": FakeRoute(
        "/router/v1/shutdown", Surface.CONTROL, Role.ADMIN, True, handler="control.shutdown"
    ),
}


ROUTE = web.RequestKey("route", FakeRoute)


def route_of(request: web.Request) -> FakeRoute:
    """Stand-in for classify: look the path up once, cache it on the request."""
    if ROUTE not in request:
        route = ROUTES.get(request.path)
        if route is None:
            raise errors.RouteNotFound(request.path)
        request[ROUTE] = route
    return request[ROUTE]


def settings(**server: object) -> Settings:
    return Settings(server=ServerSection(**server))  # type: ignore[arg-type]


class Recorder:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.conf = Settings()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.paths.append(request.path)
        if request.path == "/v1/realtime":
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            await ws.close()
            return ws
        if request.path == "/slow":
            await asyncio.sleep(1.0)
        if request.can_read_body:
            # production's capped reader, with the cap the size guard applies to this route
            cap = body_cap_for(route_of(request), self.conf)
            body = await read_body(request, cap, "the route's body cap")
            return web.json_response({"read": len(body)})
        return web.json_response({"ok": True})


def make_app(
    conf: Settings, recorder: Recorder, allowlist: HostAllowlist | None = None
) -> web.Application:
    middlewares = edge_middlewares(conf, route_of)
    if allowlist is not None:
        from router.edge.guards import host_allowlist

        middlewares[1] = host_allowlist(conf, route_of, allowlist)
    recorder.conf = conf
    app = web.Application(middlewares=[edge_errors(conf, route_of), *middlewares])
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    return app


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


# --- peer CIDR ----------------------------------------------------------------------------


async def test_peer_outside_allowed_cidrs_is_refused_before_routing(
    aiohttp_client, recorder
) -> None:
    client = await aiohttp_client(make_app(settings(allowed_cidrs=("10.0.0.0/8",)), recorder))
    resp = await client.get("/api/tags")
    assert resp.status == 403
    assert "allowed_cidrs" in (await resp.json())["error"]  # Ollama shape: {"error": "..."}
    assert (await client.get("/no/such/route")).status == 403  # never reveals the route table
    assert recorder.paths == []


async def test_peer_inside_allowed_cidrs_passes(aiohttp_client, recorder) -> None:
    client = await aiohttp_client(make_app(settings(), recorder))
    assert (await client.get("/v1/models")).status == 200


def test_peer_allowed_parses_mapped_scoped_and_bad_addresses() -> None:
    nets = settings(allowed_cidrs=("192.168.0.0/16", "fe80::/10")).server.networks()
    assert peer_allowed("192.168.1.9", nets)
    assert peer_allowed("::ffff:192.168.1.9", nets)
    assert peer_allowed("fe80::1%eth0", nets)
    assert not peer_allowed("10.0.0.1", nets)
    assert not peer_allowed("not-an-ip", nets)
    assert not peer_allowed(None, nets)
    assert not peer_allowed("", nets)


# --- Host allowlist (S14) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("LocalHost:8080", ("localhost", 8080)),
        ("[::1]:80", ("::1", 80)),
        ("::1", ("::1", None)),
        ("[0:0:0:0:0:0:0:1]", ("::1", None)),
        ("box.lan.", ("box.lan", None)),
        ("box:abc", None),
        ("box:", None),
        ("box:70000", None),
        ("[::1]x", None),
        ("", None),
    ],
)
def test_split_host(value: str, expected: tuple[str, int | None] | None) -> None:
    assert split_host(value) == expected


@pytest.mark.parametrize("profile", ["secure", "trusted_lan"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/router/v1/unload", "/", "/api/tags"])
async def test_foreign_host_is_refused_in_both_profiles(
    aiohttp_client, recorder, profile, path
) -> None:
    conf = Settings(security=SecuritySection(profile=profile))
    client = await aiohttp_client(make_app(conf, recorder))
    resp = await client.get(path, headers={"Host": "attacker.example"})
    assert resp.status == 403
    assert recorder.paths == []


async def test_foreign_host_websocket_upgrade_is_refused(aiohttp_client, recorder) -> None:
    client = await aiohttp_client(make_app(settings(), recorder))
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await client.ws_connect("/v1/realtime", headers={"Host": "attacker.example:8080"})
    assert info.value.status == 403


async def test_loopback_names_and_configured_hosts_pass(aiohttp_client, recorder) -> None:
    conf = settings(bind="192.168.7.7:8080", allowed_hosts=("gpu-box.lan", "Router.Home"))
    client = await aiohttp_client(make_app(conf, recorder))
    for host in [
        "localhost",
        "127.0.0.1:9",
        "[::1]:8080",
        "::1",
        "127.0.0.2",
        "gpu-box.lan:8080",
        "GPU-BOX.LAN",
        "router.home",
        "192.168.7.7:8080",
    ]:
        assert (await client.get("/v1/models", headers={"Host": host})).status == 200, host
    assert (await client.get("/v1/models", headers={"Host": "192.168.7.8"})).status == 403


def test_specific_bind_does_not_admit_other_interfaces() -> None:
    hosts = HostAllowlist(settings(bind="127.0.0.1:8080"), addresses=lambda: ["192.168.1.5"])
    assert not hosts.allows("192.168.1.5:8080")
    assert not hosts.allows(None)
    assert not hosts.allows("")


def test_wildcard_bind_admits_interface_addresses_and_refreshes_them() -> None:
    now = [0.0]
    current = ["192.168.1.5", "fe80::1"]
    hosts = HostAllowlist(
        settings(bind="0.0.0.0:8080"), addresses=lambda: list(current), clock=lambda: now[0]
    )
    assert hosts.allows("192.168.1.5:8080") and hosts.allows("[fe80::1]:8080")
    current.append("10.8.0.2")  # a VPN came up
    assert not hosts.allows("10.8.0.2")  # no rescan within the refresh interval
    now[0] = 11.0
    assert hosts.allows("10.8.0.2")
    assert not hosts.allows("attacker.example")


def test_wildcard_bind_uses_the_real_interfaces_by_default() -> None:
    hosts = HostAllowlist(settings(bind="[::]:8080"))
    assert hosts.allows("127.0.0.1") and hosts.allows("[::1]:8080")
    assert not hosts.allows("attacker.example")


# --- size caps (S5) -----------------------------------------------------------------------


def tiny_limits(**server: object) -> Settings:
    # ~1 KiB control cap, ~2 KiB stream cap
    return Settings(
        server=ServerSection(**server),  # type: ignore[arg-type]
        limits=LimitsSection(
            max_control_body_mb=0.001, selector_scan_mb=0.001, max_stream_request_gb=2e-6
        ),
    )


def test_body_cap_for_control_and_streaming_routes() -> None:
    conf = Settings()
    assert body_cap_for(ROUTES["/router/v1/unload"], conf) == 8 * 1024 * 1024
    assert body_cap_for(ROUTES["/v1/chat/completions"], conf) == 4 * 1024**3


async def test_declared_length_over_the_cap_is_413_without_reading(
    aiohttp_client, recorder
) -> None:
    client = await aiohttp_client(make_app(tiny_limits(), recorder))
    resp = await client.post("/router/v1/unload", data=b"x" * 1100)
    assert resp.status == 413
    resp = await client.post("/v1/chat/completions", data=b"x" * 2200)
    assert resp.status == 413
    assert recorder.paths == []
    ok = await client.post("/v1/chat/completions", data=b"x" * 1100)
    assert (await ok.json()) == {"read": 1100}


async def test_chunked_body_is_cut_when_it_passes_the_cap(aiohttp_client, recorder) -> None:
    client = await aiohttp_client(make_app(tiny_limits(), recorder))

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"y" * 500

    resp = await client.post("/v1/chat/completions", data=chunks())
    assert resp.status == 413
    assert "larger than" in (await resp.json())["error"]["message"]


async def test_classify_errors_and_refusals_are_rendered_by_edge_errors(
    aiohttp_client, recorder
) -> None:
    client = await aiohttp_client(make_app(settings(), recorder))
    missing = await client.get("/nope")
    assert missing.status == 404 and "no route" in (await missing.json())["error"]["message"]
    refused = await client.get("/api/nope", headers={"Host": "attacker.example"})
    assert refused.status == 403 and isinstance((await refused.json())["error"], str)


@pytest.mark.parametrize(
    ("conf", "path", "headers"),
    [
        (settings(allowed_cidrs=("10.0.0.0/8",)), "/v1/models", {}),
        (settings(), "/v1/models", {"Host": "attacker.example"}),
        (tiny_limits(), "/router/v1/unload", {"Content-Length": "5000"}),
        (settings(), "/api/tags", {"Origin": "https://evil.example"}),
    ],
    ids=["peer", "host", "size", "origin"],
)
async def test_guards_raise_and_never_render(conf, path, headers) -> None:
    """Each guard alone raises its refusal: edge_errors is the one place it becomes a response."""
    from aiohttp.test_utils import make_mocked_request

    async def unreachable(request: web.Request) -> web.StreamResponse:
        raise AssertionError("the guard let the request through")

    defaults = {"Host": "127.0.0.1", **headers}
    for guard in edge_middlewares(conf, route_of):
        request = make_mocked_request("POST", path, headers=defaults)
        try:
            await guard(request, unreachable)
        except AssertionError:
            continue  # not this guard's business
        except errors.RouterError as err:
            assert err.status in (403, 413)
            assert err.close is (err.status == 413)
            break
    else:
        raise AssertionError("no guard refused the request")


def test_body_cap_follows_classify_body_mode() -> None:
    @dataclass(frozen=True)
    class WithBody:
        surface: Surface
        body: str

    conf = Settings()
    assert body_cap_for(WithBody(Surface.SITE, "control"), conf) == 8 * 1024 * 1024
    assert body_cap_for(WithBody(Surface.CONTROL, "stream"), conf) == 4 * 1024**3


# --- Origin (S15, S16) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1:8080", True),
        ("http://Box.Lan", "box.lan:80", True),
        ("https://box.lan", "box.lan", True),
        ("http://[::1]:8080", "[::1]:8080", True),
        ("http://box.lan", "box.lan:8080", False),
        ("https://box.lan:8080", "box.lan:8443", False),
        ("http://evil.example", "box.lan", False),
        ("null", "box.lan", False),
        ("file://", "box.lan", False),
        ("http://box.lan:99999", "box.lan", False),
        ("http://box.lan", None, False),
    ],
)
def test_same_origin(origin: str, host: str | None, same: bool) -> None:
    assert same_origin(origin, host) is same


CROSS_SITE = [
    {"Origin": "https://evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
]


@pytest.mark.parametrize("headers", CROSS_SITE)
@pytest.mark.parametrize(
    "path", ["/router/v1/unload", "/router/v1/shutdown", "/v1/chat/completions", "/api/chat"]
)
async def test_cross_site_state_changing_requests_are_refused(
    aiohttp_client, recorder, headers, path
) -> None:
    client = await aiohttp_client(make_app(settings(), recorder))
    resp = await client.post(path, data=b"{}", headers={"Content-Type": "text/plain", **headers})
    assert resp.status == 403
    body = await resp.json()
    assert isinstance(body["error"], str if path == "/api/chat" else dict)
    assert recorder.paths == []


async def test_origin_strict_routes_check_reads_too(aiohttp_client, recorder) -> None:
    client = await aiohttp_client(make_app(settings(), recorder))
    assert (await client.get("/api/tags", headers={"Origin": "http://evil.example"})).status == 403
    # a plain read elsewhere is left to the browser's CORS rules
    assert (await client.get("/v1/models", headers={"Origin": "http://evil.example"})).status == 200


async def test_same_origin_and_top_level_navigation_pass(aiohttp_client, recorder) -> None:
    client = await aiohttp_client(make_app(settings(), recorder))
    me = f"http://127.0.0.1:{client.server.port}"
    resp = await client.post("/api/chat", data=b"{}", headers={"Origin": me})
    assert resp.status == 200
    nav = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert (await client.get("/", headers=nav)).status == 200
    # non-browser clients send neither header
    assert (await client.post("/router/v1/unload", data=b"{}")).status == 200


async def test_websocket_with_foreign_origin_is_refused_before_101(
    aiohttp_client, recorder
) -> None:
    client = await aiohttp_client(make_app(settings(), recorder))
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await client.ws_connect("/v1/realtime", origin="https://evil.example")
    assert info.value.status == 403
    assert recorder.paths == []
    ws = await client.ws_connect("/v1/realtime", origin=f"http://127.0.0.1:{client.server.port}")
    await ws.close()
    assert recorder.paths == ["/v1/realtime"]


# --- connection level (S1, S3, S4) --------------------------------------------------------


@asynccontextmanager
async def listener(conf: Settings, recorder: Recorder) -> AsyncIterator[int]:
    runner = web.AppRunner(make_app(conf, recorder), **runner_kwargs(conf))
    await runner.setup()
    site = capped_site(runner, conf, "127.0.0.1", 0)
    await site.start()
    try:
        yield site.port
    finally:
        await runner.cleanup()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(x.split(":")[1]) for x in lines if x.lower().startswith("content-length"))
    body = await asyncio.wait_for(reader.readexactly(length), 5)
    return int(lines[0].split()[1]), body


async def request_on(port: int, raw: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    try:
        return await read_response(reader)
    finally:
        writer.close()


GET = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def test_connection_cap_answers_503_to_connection_n_plus_1(recorder) -> None:
    conf = settings(max_connections=3)
    async with listener(conf, recorder) as port:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for reader, writer in held:  # each is served and stays open (keep-alive)
            writer.write(GET)
            assert (await read_response(reader))[0] == 200
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(GET)
        status, body = await read_response(reader)
        assert status == 503 and b"3 connections" in body
        assert await asyncio.wait_for(reader.read(), 5) == b""  # and closed
        writer.close()
        held[0][1].close()
        await asyncio.sleep(0.1)
        assert (await request_on(port, GET))[0] == 200  # a freed slot is reusable
        for _, w in held[1:]:
            w.close()
    assert len(recorder.paths) == 4


async def test_sites_sharing_a_guard_share_the_cap(recorder) -> None:
    conf = settings(max_connections=1)
    runner = web.AppRunner(make_app(conf, recorder), **runner_kwargs(conf))
    await runner.setup()
    guard = ConnectionGuard(conf)
    sites = [capped_site(runner, conf, "127.0.0.1", 0, guard=guard) for _ in range(2)]
    try:
        for site in sites:
            await site.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", sites[0].port)
        writer.write(GET)
        assert (await read_response(reader))[0] == 200
        assert (await request_on(sites[1].port, GET))[0] == 503
        writer.close()
    finally:
        await runner.cleanup()


async def held_from(peer: str, port: int, n: int) -> list[asyncio.StreamWriter]:
    """n connections from `peer` (any 127.0.0.0/8 address is this machine on Linux), each
    served once and then kept open."""
    writers = []
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(peer, 0))
        writer.write(GET)
        assert (await read_response(reader))[0] == 200
        writers.append(writer)
    return writers


async def request_from(peer: str, port: int, raw: bytes = GET) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(peer, 0))
    writer.write(raw)
    try:
        return await read_response(reader)
    finally:
        writer.close()


async def test_one_peer_address_cannot_take_more_than_its_share(recorder) -> None:
    conf = settings(max_connections=20, max_connections_per_peer=4)
    async with listener(conf, recorder) as port:
        held = await held_from("127.0.0.2", port, 4)
        status, body = await request_from("127.0.0.2", port)
        assert status == 503 and b"max_connections_per_peer" in body
        assert (await request_from("127.0.0.3", port))[0] == 200  # other peers are unaffected
        held[0].close()
        await asyncio.sleep(0.1)
        assert (await request_from("127.0.0.2", port))[0] == 200  # its slot came back
        for w in held[1:]:
            w.close()


async def test_the_last_slots_are_kept_for_reserved_peers(recorder) -> None:
    conf = settings(max_connections=6, max_connections_per_peer=6, reserved_connections=2)
    async with listener(conf, recorder) as port:
        held = await held_from("127.0.0.2", port, 4)  # 127.0.0.2 is not in reserved_cidrs
        status, body = await request_from("127.0.0.3", port)
        assert status == 503 and b"server.max_connections" in body
        operator = await held_from("127.0.0.1", port, 2)  # the reserve
        assert (await request_from("127.0.0.1", port))[0] == 503  # the cap itself still holds
        for w in held + operator:
            w.close()


async def wait_closed(reader: asyncio.StreamReader, within: float) -> tuple[bytes, float]:
    start = time.monotonic()
    data = await asyncio.wait_for(reader.read(), within)
    return data, time.monotonic() - start


async def test_slow_headers_get_408_and_close_at_the_deadline(recorder) -> None:
    async with listener(settings(header_timeout=0.5), recorder) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/models HTTP/1.1\r\nHo")
        data, waited = await wait_closed(reader, 3)
        assert data.startswith(b"HTTP/1.1 408") and 0.4 < waited < 2
        silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)
        data, waited = await wait_closed(silent_reader, 3)
        assert data.startswith(b"HTTP/1.1 408") and waited < 2
        writer.close()
        silent.close()
    assert recorder.paths == []


async def test_header_deadline_spares_slow_handlers_and_times_the_next_request(recorder) -> None:
    async with listener(settings(header_timeout=0.5), recorder) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await read_response(reader))[0] == 200  # took 1 s, twice the deadline
        await asyncio.sleep(0.8)  # idle keep-alive is not a slow header
        writer.write(b"GET /v1/models HTTP/1.1\r\nHo")  # second request trickles
        data, waited = await wait_closed(reader, 3)
        assert data == b"" and 0.4 < waited < 2
        writer.close()
    assert recorder.paths == ["/slow"]


async def test_oversized_request_line_and_headers_never_reach_routing(recorder) -> None:
    async with listener(settings(), recorder) as port:
        long_line = b"GET /v1/models?q=" + b"a" * 65536 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        assert (await request_on(port, long_line))[0] == 414
        big_header = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 102400 + b"\r\n\r\n"
        status, body = await request_on(port, big_header)
        assert status == 431 and b"header" in body
        many = (
            b"GET / HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-H%d: v\r\n" % i for i in range(10_000))
            + b"\r\n"
        )
        assert (await request_on(port, many))[0] == 431
        assert (await request_on(port, b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n"))[
            0
        ] == 400
        ok = b"GET /v1/models?q=" + b"a" * (MAX_URL_BYTES - 100) + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        assert (await request_on(port, ok))[0] == 403  # parsed fine; refused by the Host rule
    assert recorder.paths == []


async def test_huge_declared_body_is_refused_before_it_is_sent(recorder, caplog) -> None:
    started = time.monotonic()
    async with listener(settings(), recorder) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /router/v1/unload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Length: 10000000000\r\n\r\n"
        )
        status, _ = await read_response(reader)  # no body byte was ever sent
        assert status == 413
        writer.close()
    # the server stops waiting for the unsent body once the client has gone
    assert time.monotonic() - started < 5
    assert recorder.paths == []
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_runner_kwargs_tie_parser_limits_to_settings() -> None:
    kwargs = runner_kwargs(Settings(limits=LimitsSection(max_header_kb=16)))
    assert kwargs["max_field_size"] == 16 * 1024
    assert kwargs["max_line_size"] == MAX_URL_BYTES != kwargs["max_field_size"]
