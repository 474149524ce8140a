"""Reliability matrix R4, R27, R28: a real `tensor-router start` process, killed or stopped.

Each test writes a router.yaml (trusted_lan, loopback bind on a free port, program sections
pointing at fake backends) and runs the CLI as a subprocess. The test process is a child
subreaper, so backends orphaned by a killed router are re-parented here: visible, and reaped.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time

import aiohttp
import httpx
import psutil

from tests.support.harness import RouterHarness, SseEvent, chat, read_sse, wait_for
from tests.support.proctree import reap_zombie_children
from tests.support.router_process import gone, new_router

CHAT = "/v1/chat/completions"


def _three_lanes(h: RouterHarness) -> list[str]:
    h.model("chat-a")
    h.model("img", sdmodel="img.safetensors")
    h.model("voice", whispermodel="voice.bin")
    return ["chat-a", "img", "voice"]


async def _load_all(base: str, models: list[str]) -> list[dict]:
    async with httpx.AsyncClient(base_url=base, timeout=20) as c:
        for model in models:
            r = await c.post("/router/v1/load", json={"model": model})
            assert r.status_code == 200, r.text
        status = (await c.get("/router/v1/status")).json()
    return status["runtimes"]


# ---- R4: kill -9 the router ------------------------------------------------------------------


async def test_r4_kill9_router_leaves_no_backend(tmp_harness: RouterHarness) -> None:
    models = _three_lanes(tmp_harness)
    tmp_harness.wrap["llamacpp"] = (
        "fork"  # one backend with a grandchild: only the watchdog covers it
    )
    router = new_router(tmp_harness)
    await router.start()
    runtimes = await _load_all(router.base, models)
    assert sorted(rt["lanes"][0] for rt in runtimes) == ["image", "text", "voice"]
    assert all(rt["state"] == "ready" for rt in runtimes)
    tree = router.descendants()  # backends, the llama grandchild and the watchdog
    assert len(tree) >= 5, tree
    os.kill(router.pid, signal.SIGKILL)
    router.proc.wait(5)  # type: ignore[union-attr]
    killed_at = time.monotonic()
    ok = await wait_for(lambda: (reap_zombie_children() or True) and all(map(gone, tree)), 2.0)
    survivors = [pid for pid in tree if not gone(pid)]
    assert ok, f"{len(survivors)} processes outlived the router by 2 s: {survivors}"
    assert time.monotonic() - killed_at <= 2.0


async def test_r4_next_start_reaps_pidfile_survivors(tmp_harness: RouterHarness) -> None:
    """Even with the watchdog gone, a backend that escaped the death signal (its server left
    the session with setsid) is killed by the next router started on the same data dir."""
    tmp_harness.model("chat-a")
    tmp_harness.wrap["llamacpp"] = "setsid"
    router = new_router(tmp_harness)
    await router.start()
    async with httpx.AsyncClient(base_url=router.base, timeout=20) as c:
        r = await c.post(CHAT, json=chat("chat-a"))
        assert r.status_code == 200, r.text
    server_pid = int(r.headers["x-fake-pid"])
    watchdogs = [
        p
        for p in psutil.Process(router.pid).children()
        if any("watchdog" in part for part in p.cmdline())
    ]
    assert len(watchdogs) == 1
    pidfiles = list((tmp_harness.tmp / "data" / "pids").glob("*.pid"))
    assert len(pidfiles) == 1
    watchdogs[0].kill()
    os.kill(router.pid, signal.SIGKILL)
    router.proc.wait(5)  # type: ignore[union-attr]
    await asyncio.sleep(0.5)
    reap_zombie_children()
    assert not gone(server_pid), "precondition: the setsid'ed server survived the kill"
    assert json.loads(pidfiles[0].read_text())["tag"]

    second = new_router(tmp_harness)
    await second.start()
    assert await wait_for(lambda: (reap_zombie_children() or True) and gone(server_pid), 2.0)
    assert list((tmp_harness.tmp / "data" / "pids").glob("*.pid")) == []
    os.kill(second.pid, signal.SIGTERM)
    assert await second.wait_exit(5) == 0


# ---- R27 / R28: graceful stop ------------------------------------------------------------------


async def _stream(client: httpx.AsyncClient, body: dict, started: asyncio.Event) -> list[SseEvent]:
    async with client.stream("POST", CHAT, json=body) as r:
        assert r.status_code == 200
        started.set()
        return await read_sse(r)


def _connect_refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        return False


async def test_r27_sigterm_drains_streams_and_refuses_the_queue(
    tmp_harness: RouterHarness,
) -> None:
    tmp_harness.model("chat-a")
    tmp_harness.model("chat-b")
    tmp_harness.faults["llamacpp"] = "--token-rate 10"
    router = new_router(tmp_harness, drain_timeout=10)
    await router.start()
    runtimes = await _load_all(router.base, ["chat-a"])
    backend_pid = runtimes[0]["pid"]
    n = 40  # 4 s per stream: they outlast the checks below, so the order proves "at once"
    async with httpx.AsyncClient(base_url=router.base, timeout=20) as client:
        started = [asyncio.Event() for _ in range(3)]
        streams = [
            asyncio.create_task(_stream(client, chat("chat-a", stream=True, max_tokens=n), ev))
            for ev in started
        ]
        for ev in started:
            await asyncio.wait_for(ev.wait(), 10)
        queued = asyncio.create_task(client.post(CHAT, json=chat("chat-b")))

        async def queue_len() -> int:
            return (await client.get("/router/v1/status")).json()["queued"]["text"]

        end = time.monotonic() + 5
        while await queue_len() != 1 and time.monotonic() < end:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        assert await queue_len() == 1

        os.kill(router.pid, signal.SIGTERM)
        term_at = time.monotonic()
        assert await wait_for(lambda: _connect_refused(router.port), 2.0), "listener still open"
        reply = await queued
        assert reply.status_code == 503, reply.text
        assert reply.headers.get("retry-after")
        # Refused at once: while the streams still drain, not when the drain has ended (an
        # order of events, which a busy machine does not change; the wall clock is a backstop).
        assert not any(s.done() for s in streams), "the queued request waited for the drain"
        assert time.monotonic() - term_at < 3.0, "the queued request should be refused at once"
        results = await asyncio.gather(*streams)
    for events in results:
        tokens = [e for e in events if '"content": "tok' in e.data]
        assert len(tokens) == n and events[-1].data == "[DONE]", "a stream was cut"
    code = await router.wait_exit(5)
    assert code == 0, router.log.read_text()[-2000:]
    assert gone(backend_pid)


async def test_r27_drain_deadline_ends_long_streams_with_an_error_event(
    tmp_harness: RouterHarness,
) -> None:
    tmp_harness.model("chat-a")
    tmp_harness.faults["llamacpp"] = "--token-rate 10"
    drain = 1.0
    router = new_router(tmp_harness, drain_timeout=drain)
    await router.start()
    async with httpx.AsyncClient(base_url=router.base, timeout=20) as client:
        started = asyncio.Event()
        stream = asyncio.create_task(
            _stream(client, chat("chat-a", stream=True, max_tokens=100), started)
        )
        await asyncio.wait_for(started.wait(), 20)
        os.kill(router.pid, signal.SIGTERM)
        term_at = time.monotonic()
        try:
            events = await stream
            outcome = "eof"
        except httpx.HTTPError as exc:  # a chunked body cut without its terminator
            events, outcome = [], type(exc).__name__
        ended = time.monotonic() - term_at
    code = await router.wait_exit(5)
    assert code == 0
    assert ended < drain + 1.0, f"the stream ran {ended:.2f}s past SIGTERM"
    assert outcome == "eof" and events and events[-1].event == "error", (
        f"the cut stream should end with a terminal error event, got {outcome}: "
        f"{events[-1] if events else None}"
    )


async def test_r28_idle_keepalive_does_not_delay_shutdown(tmp_harness: RouterHarness) -> None:
    router = new_router(tmp_harness, drain_timeout=10)
    await router.start()
    async with httpx.AsyncClient(base_url=router.base) as client:
        assert (await client.get("/health")).status_code == 200  # keep-alive socket in the pool
        os.kill(router.pid, signal.SIGTERM)
        term_at = time.monotonic()
        code = await router.wait_exit(12)
        took = time.monotonic() - term_at
    assert code == 0
    assert took < 1.5, f"an idle keep-alive connection held the shutdown for {took:.2f}s"


async def test_r28_idle_event_subscriber_does_not_hold_past_the_drain_deadline(
    tmp_harness: RouterHarness,
) -> None:
    drain = 2.0
    router = new_router(tmp_harness, drain_timeout=drain)
    await router.start()
    async with httpx.AsyncClient(base_url=router.base, timeout=20) as client:
        subscribed = asyncio.Event()

        async def subscribe() -> None:
            async with client.stream("GET", "/router/v1/events") as r:
                assert r.status_code == 200
                subscribed.set()
                async for _ in r.aiter_lines():
                    pass

        sub = asyncio.create_task(subscribe())
        await asyncio.wait_for(subscribed.wait(), 5)
        os.kill(router.pid, signal.SIGTERM)
        term_at = time.monotonic()
        code = await router.wait_exit(drain + 5)
        took = time.monotonic() - term_at
        await asyncio.gather(sub, return_exceptions=True)
    assert code == 0
    assert took < drain + 1.0, f"shutdown took {took:.2f}s with drain_timeout {drain}s"


async def test_r28_idle_realtime_socket_is_closed_with_1001_and_does_not_hold_shutdown(
    tmp_harness: RouterHarness,
) -> None:
    tmp_harness.model(
        "vl",
        "vllm",
        model_param="vl-text.safetensors",
        whispermodel="vl-asr.safetensors",
    )
    drain = 60.0  # the socket's lease would hold the stop this long
    router = new_router(tmp_harness, drain_timeout=drain)
    await router.start()
    async with aiohttp.ClientSession() as session:
        url = f"ws://127.0.0.1:{router.port}/v1/realtime?model=vl"
        async with session.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=10)) as ws:
            await ws.send_str("hello")
            assert await ws.receive_str(timeout=20) == "hello"  # relayed: the session is open
            os.kill(router.pid, signal.SIGTERM)  # ... and now idle
            term_at = time.monotonic()
            closing = await ws.receive(timeout=10)
            assert closing.type is aiohttp.WSMsgType.CLOSE, closing
            assert closing.data == 1001
        code = await router.wait_exit(drain / 2)
        took = time.monotonic() - term_at
    assert code == 0, router.log.read_text()[-2000:]
    assert took < 10, f"the stop took {took:.1f}s with one idle realtime socket"
