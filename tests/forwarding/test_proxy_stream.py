"""Reliability matrix R9, R10, R20-R23, R30-R32: streaming through the router.

A real router on a real socket (tests/support/harness.py), fake backends launched through the real
supervisor. Each test is named after its matrix row and ends with no backend process left.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import statistics
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest
from aiohttp import web

from router.domain import Lane
from tests.fakes.wrappers import fake_argv
from tests.support.harness import (
    RouterHarness,
    SseEvent,
    chat,
    free_port,
    read_sse,
    stream_chat,
    wait_for,
)

CHAT = "/v1/chat/completions"


def _tokens(events: list[SseEvent]) -> list[str]:
    out = []
    for e in events:
        if e.event == "message" and e.data != "[DONE]":
            delta = json.loads(e.data)["choices"][0].get("delta", {})
            if delta.get("content"):
                out.append(delta["content"])
    return out


def _assert_terminal_error(events: list[SseEvent]) -> None:
    assert events, "the stream was empty"
    last = events[-1]
    assert last.event == "error", f"the stream did not end with an error event: {last}"
    error = json.loads(last.data)["error"]
    assert error["message"] and error["code"] == 502
    assert all(e.data != "[DONE]" for e in events), "a cut stream must not look finished"


# ---- R9 / R10: a backend that hangs or dies mid-stream ------------------------------------


async def test_r9_hung_backend_streams_end_with_error_and_it_is_restarted(
    harness: RouterHarness,
) -> None:
    idle = 0.6
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--hang-after-tokens 3 --token-rate 50"
    client = await harness.start(harness.settings(stream_idle_timeout=idle, stop_grace=1))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (first,) = harness.runtimes.runtimes()
    started = time.monotonic()
    results = await asyncio.gather(
        *(stream_chat(client, chat("chat-a", stream=True, max_tokens=10)) for _ in range(4))
    )
    elapsed = time.monotonic() - started
    for status, events in results:
        assert status == 200
        assert len(_tokens(events)) == 3
        _assert_terminal_error(events)
    assert elapsed < idle + 1.5, f"streams took {elapsed:.2f}s to end"
    # The stalled backend (its /health still 200) was failed and stopped...
    assert await wait_for(lambda: first.process.returncode is not None, 3)
    assert await wait_for(first.gone.is_set, 3)  # its lanes are freed once it has exited
    # ...and the next request relaunches it (2 tokens stay under the hang).
    r = await client.post(CHAT, json=chat("chat-a", max_tokens=2))
    assert r.status_code == 200, r.text
    assert int(r.headers["x-fake-pid"]) != first.process.pid
    assert harness.runtimes.spawn_count == 2


async def test_r10_crash_mid_stream_ends_every_stream_and_relaunches(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--crash-after-tokens 5 --token-rate 50"
    client = await harness.start(harness.settings(stop_grace=1))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (first,) = harness.runtimes.runtimes()
    results = await asyncio.wait_for(
        asyncio.gather(
            *(stream_chat(client, chat("chat-a", stream=True, max_tokens=20)) for _ in range(6))
        ),
        10,
    )
    for status, events in results:
        assert status == 200
        assert len(_tokens(events)) <= 5
        _assert_terminal_error(events)
    assert await wait_for(lambda: first.process.returncode is not None, 3)
    assert first.process.returncode == 134 and first.gone.is_set()
    r = await client.post(CHAT, json=chat("chat-a", max_tokens=3))
    assert r.status_code == 200, r.text
    assert harness.runtimes.spawn_count == 2


# ---- R20 / R21: per-event delivery and headers --------------------------------------------


async def _direct_backend(tmp: Path, *switches: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    model = tmp / "direct.gguf"
    model.write_bytes(b"GGUF")
    proc = subprocess.Popen(  # noqa: ASYNC220 (a quick fork-exec)
        fake_argv("llamacpp", "-m", str(model), "--port", str(port), *switches),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as c:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                if (await c.get(base + "/health", timeout=1)).status_code == 200:
                    return proc, base
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError("the direct backend never came up")


async def test_r20_events_are_not_coalesced_or_delayed(harness: RouterHarness) -> None:
    rate, n = 20, 20  # one event every 50 ms
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--token-rate {rate}"
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    direct, base = await _direct_backend(harness.tmp, "--token-rate", str(rate))
    try:
        body = chat("chat-a", stream=True, max_tokens=n)
        async with httpx.AsyncClient(base_url=base) as dc:
            _, direct_events = await stream_chat(dc, body)
        _, routed_events = await stream_chat(client, body)
    finally:
        direct.terminate()
        direct.wait(5)
    assert len(routed_events) == len(direct_events)
    assert [e.event for e in routed_events] == [e.event for e in direct_events]
    # Token events after the first are paced 50 ms apart by the backend: each must arrive on
    # its own (a coalesced pair arrives in the same read, ~0 ms apart). A stall of the client
    # or the router on a busy 2-core box also brings two together now and then, so the bound
    # is on how many: a router that coalesced even pairs would bring half of them together.
    paced = slice(3, 2 + n)
    pairs = zip(routed_events[paced][:-1], routed_events[paced][1:], strict=True)
    gaps = [b.at - a.at for a, b in pairs]
    together = [g for g in gaps if g < 0.005]
    assert len(together) <= len(gaps) // 4, f"events arrived together: {sorted(gaps)[:6]}"
    # Arrival offsets from the first token, router vs direct, event by event.
    r0, d0 = routed_events[2].at, direct_events[2].at
    added = [
        (r.at - r0) - (d.at - d0) for r, d in zip(routed_events[2:], direct_events[2:], strict=True)
    ]
    p50 = statistics.median(abs(a) for a in added)
    assert p50 < 0.02, f"router adds {p50 * 1000:.1f} ms per event (p50)"


async def test_r21_streaming_headers(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    async with client.stream("POST", CHAT, json=chat("chat-a", stream=True)) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-accel-buffering"] == "no"
        assert r.headers["cache-control"] == "no-cache"
        assert r.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in r.headers
        assert r.headers.get("connection", "").lower() != "close"
        events = await read_sse(r)
    assert events[-1].data == "[DONE]"
    # The connection stays usable: the next request goes over the same keep-alive socket.
    r2 = await client.post(CHAT, json=chat("chat-a"))
    assert r2.status_code == 200


# ---- R22: a client that stops reading -------------------------------------------------------


async def _raw_request(port: int, body: dict) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1024)
    payload = json.dumps(body).encode()
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    writer.write(
        b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: "
        + str(len(payload)).encode()
        + b"\r\n\r\n"
        + payload
    )
    await writer.drain()
    return reader, writer


async def _slots_busy(base_url: str) -> bool:
    async with httpx.AsyncClient() as c:
        r = await c.get(base_url + "/slots", timeout=2)
        return bool(r.json()[0]["is_processing"])


async def test_r22_stalled_reader_memory_is_bounded(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start(harness.settings(stream_idle_timeout=1))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    me = psutil.Process()
    gc.collect()
    rss0 = me.memory_info().rss
    port = harness.server.port
    reader, writer = await _raw_request(port, chat("chat-a", stream=True, max_tokens=100_000))
    try:
        got = await asyncio.wait_for(reader.read(1024), 5)  # read 1 KiB, then stop reading
        assert got.startswith(b"HTTP/1.1 200")
        peak = rss0
        for _ in range(20):  # 2 s of a backend writing as fast as it can
            await asyncio.sleep(0.1)
            peak = max(peak, me.memory_info().rss)
        growth = (peak - rss0) / (1024 * 1024)
        assert growth < 4, f"router RSS grew {growth:.1f} MiB for one stalled stream"
    finally:
        writer.close()
    # The stream is flow-controlled end to end: the backend is blocked, not buffered into us.
    await asyncio.sleep(0.2)
    assert await wait_for(lambda: runtime.leases == 0, 3), "the lease was not released"


async def test_r22_stalled_reader_is_cut_after_a_send_deadline(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start(harness.settings(stream_idle_timeout=1))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    port = harness.server.port
    reader, writer = await _raw_request(port, chat("chat-a", stream=True, max_tokens=100_000))
    try:
        await asyncio.wait_for(reader.read(1024), 5)
        assert await _slots_busy(runtime.base_url)
        # With a 1 s idle deadline, 3 s without reading must end the upstream request.
        cut = await wait_for(lambda: runtime.leases == 0, 3)
        # The backend notices the closed upstream connection at its next write.
        for _ in range(40):  # polling another process: no event to wait on
            busy = await _slots_busy(runtime.base_url)
            if not busy:
                break
            await asyncio.sleep(0.05)
    finally:
        writer.close()
    assert cut and not busy


# ---- R23: client disconnects -------------------------------------------------------------------


def _chat_records(harness: RouterHarness, record: Path) -> list[dict]:
    return [x for x in harness.records(record) if x["path"] == CHAT]


async def test_r23_disconnect_after_five_tokens_reaches_the_backend(
    harness: RouterHarness,
) -> None:
    record = harness.tmp / "record.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--token-rate 20 --record-requests {record}"
    client = await harness.start()
    async with client.stream("POST", CHAT, json=chat("chat-a", stream=True, max_tokens=100)) as r:
        seen = 0
        async for line in r.aiter_lines():
            if '"content": "tok' in line:
                seen += 1
                if seen == 5:
                    break
        closed_at = time.time()
    assert await wait_for(lambda: any(x["disconnected"] for x in _chat_records(harness, record)))
    gone = next(x for x in _chat_records(harness, record) if x["disconnected"])
    assert gone["time"] - closed_at < 1.0
    assert await wait_for(lambda: harness.runtimes.runtimes()[0].leases == 0)


async def test_r23_disconnect_during_prefill_reaches_the_backend(harness: RouterHarness) -> None:
    record = harness.tmp / "record.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--ttft 3 --record-requests {record}"
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    with pytest.raises(httpx.ReadTimeout):  # nothing arrives during the 3 s prefill
        await client.post(CHAT, json=chat("chat-a"), timeout=0.5)
    closed_at = time.time()
    assert await wait_for(lambda: any(x["disconnected"] for x in _chat_records(harness, record)))
    gone = next(x for x in _chat_records(harness, record) if x["disconnected"])
    assert gone["time"] - closed_at < 1.0


async def test_r23_disconnect_while_queued_never_reaches_a_backend(
    harness: RouterHarness,
) -> None:
    record = harness.tmp / "record.jsonl"
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults["llamacpp"] = f"--token-rate 10 --record-requests {record}"
    client = await harness.start()
    long_a = asyncio.create_task(stream_chat(client, chat("chat-a", stream=True, max_tokens=15)))
    assert await wait_for(lambda: bool(_chat_records(harness, record)), 10)
    with pytest.raises(httpx.ReadTimeout):  # B queues behind A's stream; the client gives up
        await client.post(CHAT, json=chat("chat-b"), timeout=0.5)
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 0, 1)
    status, events = await long_a
    assert status == 200 and events[-1].data == "[DONE]"
    await asyncio.sleep(0.3)  # were B still queued, its load would start now
    assert harness.runtimes.spawn_count == 1
    assert [x["pid"] for x in _chat_records(harness, record)] == [
        _chat_records(harness, record)[0]["pid"]
    ] * len(_chat_records(harness, record))
    assert harness.runtimes.status_of("chat-b") == "unloaded"


# ---- R30-R32: retries ---------------------------------------------------------------------------


async def test_r30_connection_refused_at_start_is_retried(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--refuse-for 0.3"
    client = await harness.start()
    r = await client.post(CHAT, json=chat("chat-a"))
    assert r.status_code == 200, r.text


async def test_r30_proxy_retries_connect_within_the_window(harness: RouterHarness) -> None:
    """The backend's port refuses connections for 300 ms after the lease was granted (a backend
    that restarted its listener): the proxy retries the connect, the request succeeds once."""
    harness.model("chat-a")
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    hits: list[float] = []

    async def answer(request: web.Request) -> web.Response:
        hits.append(time.monotonic())
        return web.json_response({"object": "chat.completion", "model": "chat-a", "choices": []})

    app = web.Application()
    app.router.add_post(CHAT, answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    real_base = runtime.base_url
    runtime.base_url = f"http://127.0.0.1:{port}"
    try:

        async def listen_later() -> None:
            await asyncio.sleep(0.3)
            await web.TCPSite(runner, "127.0.0.1", port).start()

        later = asyncio.create_task(listen_later())
        started = time.monotonic()
        r = await client.post(CHAT, json=chat("chat-a"))
        await later
        assert r.status_code == 200, r.text
        assert len(hits) == 1
        assert hits[0] - started >= 0.3
    finally:
        runtime.base_url = real_base
        await runner.cleanup()


async def test_r31_reset_after_body_is_not_resent(harness: RouterHarness) -> None:
    record = harness.tmp / "record.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--reset-after-body --record-requests {record}"
    client = await harness.start()
    r = await client.post(CHAT, json=chat("chat-a"))
    assert r.status_code == 502, r.text
    assert r.json()["error"]["message"]
    await asyncio.sleep(0.3)  # a retry, if any, would land now
    assert len(_chat_records(harness, record)) == 1


async def test_r32_death_after_first_byte_is_not_retried(harness: RouterHarness) -> None:
    record = harness.tmp / "record.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--crash-after-tokens 2 --record-requests {record}"
    client = await harness.start(harness.settings(stop_grace=1))
    status, events = await stream_chat(client, chat("chat-a", stream=True, max_tokens=10))
    assert status == 200
    assert _tokens(events) == ["tok0 ", "tok1 "]
    _assert_terminal_error(events)
    await asyncio.sleep(0.3)
    assert len(_chat_records(harness, record)) == 1


async def test_r24_long_prefill_is_not_cut(harness: RouterHarness) -> None:
    # Scaled down: a 2.5 s time to first token under a 4 s idle deadline (default 300 s).
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--ttft 2.5"
    client = await harness.start(harness.settings(stream_idle_timeout=4))
    started = time.monotonic()
    async with client.stream(
        "POST", CHAT, json=chat("chat-a", stream=True, max_tokens=3), timeout=20
    ) as r:
        assert r.status_code == 200
        text = "".join([part async for part in r.aiter_text()])
    assert time.monotonic() - started >= 2.5
    assert "event: error" not in text and text.rstrip().endswith("data: [DONE]")
