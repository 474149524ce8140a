"""Hostile HTTP at the edge, through the real app on a real socket: S7 (a gzip body that
inflates far past the cap) and S8 (request smuggling shapes) never reach a backend; a handler
that fails after its response started never gets a second response written into its body;
S1 and S3 against a real router process: one address's sockets cannot starve other clients,
and a full listener still admits the loopback operator."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import subprocess
import sys
import time

import httpx
import pytest
from aiohttp import web

from router import app as app_module
from router.api.admin import meta
from router.appkeys import METRICS
from router.errors import BadGateway
from tests.support.harness import RouterHarness
from tests.support.router_process import new_router


async def raw(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


async def test_s7_gzip_bomb_on_a_control_route_is_capped_after_inflating(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a")
    settings = harness.settings()
    settings = settings.model_copy(
        update={"limits": settings.limits.model_copy(update={"max_control_body_mb": 1})}
    )
    client = await harness.start(settings)
    inflated = json.dumps({"model": "chat-a", "pad": "a" * (8 * 1024 * 1024)}).encode()
    bomb = gzip.compress(inflated, 9)
    assert len(bomb) < 64 * 1024  # well under the cap on the wire
    r = await client.post(
        "/router/v1/load",
        content=bomb,
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert harness.runtimes.spawn_count == 0


@pytest.mark.parametrize(
    "request_bytes",
    [
        # Content-Length and Transfer-Encoding together (CL.TE smuggling).
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        # Obsolete line folding.
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\r\n b\r\n"
        b"Content-Length: 2\r\n\r\n{}",
        # A bare CR inside a header value.
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\rb\r\n\r\n",
        # An invalid HTTP version.
        b"GET /health HTTP/9.7\r\nHost: 127.0.0.1\r\n\r\n",
    ],
    ids=["cl-te", "obs-fold", "bare-cr", "bad-version"],
)
async def test_s8_malformed_framing_is_refused_and_never_forwarded(
    harness: RouterHarness, request_bytes: bytes
) -> None:
    harness.model("chat-a")
    await harness.start()
    assert harness.server is not None
    answer = await raw(harness.server.port, request_bytes)
    assert answer.startswith(b"HTTP/1.1 400") or answer.startswith(b"HTTP/1.0 400"), answer[:60]
    assert harness.runtimes.spawn_count == 0


def test_s8_aiohttp_uses_its_c_http_parser() -> None:
    # The pure-Python fallback has had smuggling bugs the C parser did not (CVE-2023-37276).
    from aiohttp import http_parser

    assert http_parser.HttpRequestParser.__module__ == "aiohttp._http_parser"


# --- a failure after the response started (edge_errors never writes a second response) ----


async def exchange_to_eof(port: int, request: bytes) -> bytes:
    """Everything the router sends on one connection until it closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


def status_lines(raw_bytes: bytes) -> list[bytes]:
    return re.findall(rb"HTTP/1\.[01] \d{3}[^\r\n]*", raw_bytes)


def requests_counted(app: web.Application, route: str) -> float:
    total = 0.0
    for family in app[METRICS].registry.collect():
        for sample in family.samples:
            if sample.name == "tensor_router_requests_total" and sample.labels["route"] == route:
                total += sample.value
    return total


def post(path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode() + data


async def test_backend_dying_mid_ollama_stream_gets_no_second_status_line(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--crash-after-tokens 3"
    await harness.start()
    assert harness.server is not None and harness.app is not None
    body = {"model": "chat-a", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    answer = await exchange_to_eof(harness.server.port, post("/api/chat", body))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert status_lines(answer) == [status_lines(answer)[0]], answer
    assert b'"done": false' in answer or b'"done":false' in answer  # records did arrive
    assert requests_counted(harness.app, "/api/chat") == 1  # one analytics event


async def test_a_handler_failing_after_prepare_only_loses_its_connection(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any handler, through create_app's real middleware stack and dispatcher."""
    harness.model("chat-a")

    async def prepares_then_fails(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(b'{"partial": true}\n')
        raise BadGateway("the backend went away")

    monkeypatch.setitem(app_module.HANDLERS, "meta.health", prepares_then_fails)
    await harness.start()
    assert harness.server is not None
    get = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    answer = await exchange_to_eof(harness.server.port, get)  # keep-alive asked: still closed
    assert status_lines(answer) == [b"HTTP/1.1 200 OK"], answer
    assert b'{"partial": true}' in answer
    assert b"0\r\n\r\n" not in answer  # no chunk terminator: the client sees a cut body
    monkeypatch.setitem(app_module.HANDLERS, "meta.health", meta.HANDLERS["meta.health"])
    assert harness.client is not None
    assert (await harness.client.get("/health")).status_code == 200  # the router is fine


# --- S1 / S3: one misbehaving client must not lock everyone out (a real router process) ----

HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


async def one_health(port: int, peer: str = "127.0.0.1") -> tuple[int, float]:
    """A fresh connection per request, as a client that was cut off reconnects."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(peer, 0))
    except OSError:
        return 0, time.perf_counter() - started
    try:
        writer.write(HEALTH)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
        await asyncio.wait_for(reader.read(), 10)
        return int(head.split()[1]), time.perf_counter() - started
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return 0, time.perf_counter() - started
    finally:
        writer.close()


def p99(latencies: list[float]) -> float:
    return sorted(latencies)[int(len(latencies) * 0.99) - 1]


async def probe(ports: tuple[int, ...], n: int) -> tuple[list[list[float]], list[int]]:
    """n /health requests to each port, alternating, so machine load hits all alike."""
    latencies: list[list[float]] = [[] for _ in ports]
    failed = []
    for _ in range(n):
        for i, port in enumerate(ports):
            status, took = await one_health(port)
            latencies[i].append(took)
            if status != 200:
                failed.append(status)
    return latencies, failed


async def test_s1_trickling_sockets_from_one_address_do_not_starve_other_clients(
    tmp_harness: RouterHarness,
) -> None:
    """500 sockets from 127.0.0.2 trickle a header byte every 2 s (S1). The baseline: the same
    client's p99 before and after the attack, and during it against an identical router nobody
    attacks (a busy 2-core box slows both routers alike)."""
    router, twin = new_router(tmp_harness), new_router(tmp_harness, name="twin")  # default caps
    await router.start()
    await twin.start()
    n, attackers = 1000, 500
    (before,), failed = await probe((router.port,), n)
    assert failed == []
    attacker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.trickler",
        str(router.port),
        "127.0.0.2",
        str(attackers),
        "2",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert attacker.stdout is not None
        assert await asyncio.wait_for(attacker.stdout.readline(), 60) == b"going\n"
        (during, untouched), failed = await probe((router.port, twin.port), n)
    finally:
        attacker.kill()
        await attacker.wait()
    (after,), _ = await probe((router.port,), n)
    assert failed == [], f"{len(failed)} of {n} /health requests failed: {set(failed)}"
    baseline = max(p99(before), p99(after), p99(untouched))
    assert p99(during) <= 2 * baseline, (
        f"p99 {p99(during) * 1e3:.2f} ms under attack; baseline {baseline * 1e3:.2f} ms"
    )


async def test_s3_a_full_listener_keeps_room_for_the_loopback_operator(
    tmp_harness: RouterHarness,
) -> None:
    server = {"max_connections": 40, "max_connections_per_peer": 40, "header_timeout": "60s"}
    router = new_router(tmp_harness, server)  # 8 of the 40 kept for 127.0.0.1 and ::1
    await router.start()
    held: list[asyncio.StreamWriter] = []
    try:
        while len(held) <= 40:  # a non-reserved peer takes every slot it is given
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", router.port, local_addr=("127.0.0.2", 0)
            )
            writer.write(HEALTH.replace(b"Connection: close", b"Connection: keep-alive"))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
            if not head.startswith(b"HTTP/1.1 200"):
                writer.close()
                break
            held.append(writer)  # served, and kept open
        assert len(held) == 32  # the cap less the reserve
        status, _ = await one_health(router.port, "127.0.0.3")
        assert status == 503  # full for everyone outside reserved_cidrs
        status, _ = await one_health(router.port)
        assert status == 200
        async with httpx.AsyncClient(base_url=router.base, timeout=20) as operator:
            assert (await operator.post("/router/v1/unload", json={})).status_code == 200
            assert (await operator.get("/health")).status_code == 200
    finally:
        for writer in held:
            writer.close()


def test_the_open_file_limit_is_lifted_to_fit_the_connection_cap() -> None:
    """systemd starts services with a soft limit of 1024, the default cap alone."""
    script = (
        "import resource\n"
        "from router.server import raise_fd_limit\n"
        "_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))\n"
        "raise_fd_limit(1024)\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, check=True, text=True
    ).stdout
    soft, hard = (int(x) for x in out.split())
    assert soft == min(1024 + 256, hard if hard >= 0 else 1024 + 256)
