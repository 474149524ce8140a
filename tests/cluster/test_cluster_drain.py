"""R27 on a master: its graceful stop drains the streams it relays to a slave.

A relayed request holds no runtime lease on the master, so a drain that waited for leases cut
every relayed stream about half a second after SIGTERM. Two real `tensor-router start`
processes (tests/router_process.py), the model on the slave's fake backend, the client on the
master; SIGTERM goes to the master only.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.cluster import TOKEN, listed_ids, node_configs
from tests.support.harness import RouterHarness, SseEvent, free_port, read_sse, until
from tests.support.router_process import RouterProcess, new_router

CHAT = "/v1/chat/completions"


@pytest.fixture
def h(tmp_harness: RouterHarness) -> Iterator[RouterHarness]:
    yield tmp_harness


async def _pair(h: RouterHarness, drain: float) -> tuple[RouterProcess, RouterProcess]:
    """A master (no models, `drain_timeout` = drain) and a slave serving `far`, both ready."""
    master_port, slave_port = free_port(), free_port()
    slave_url = f"http://127.0.0.1:{slave_port}"
    master = new_router(
        h,
        name="master",
        port=master_port,
        kcpps_dir=node_configs(h, "master", {}),
        drain_timeout=drain,
        extra={
            "cluster": {
                "role": "master",
                "node_id": "m",
                "token": TOKEN,
                "public_url": f"http://127.0.0.1:{master_port}",
                "slave_urls": [slave_url],
                "health_interval": 0.3,
            }
        },
    )
    slave = new_router(
        h,
        name="s1",
        port=slave_port,
        kcpps_dir=node_configs(h, "s1", {"far": b"F"}),
        extra={
            "cluster": {
                "role": "slave",
                "node_id": "s1",
                "token": TOKEN,
                "public_url": slave_url,
                "master_url": f"http://127.0.0.1:{master_port}",
                "sync_interval": 0.5,
            }
        },
    )
    await master.start()
    await slave.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=20) as client:
        assert await until(lambda: listed_ids(client), ["far"])
    return master, slave


async def _relayed_stream_across_sigterm(
    master: RouterProcess, tokens: int
) -> tuple[list[SseEvent], float]:
    """Stream `tokens` from `far` through the master and SIGTERM the master once the answer's
    headers came back from the slave; the stream as the client read it, and how long it ran
    past the signal."""
    body = {
        "model": "far",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": tokens,
    }
    started = asyncio.Event()

    async def stream(client: httpx.AsyncClient) -> list[SseEvent]:
        async with client.stream("POST", CHAT, json=body) as r:
            assert r.status_code == 200
            started.set()
            return await read_sse(r)

    async with httpx.AsyncClient(base_url=master.base, timeout=30) as client:
        reading = asyncio.create_task(stream(client))
        await asyncio.wait_for(started.wait(), 20)
        os.kill(master.pid, signal.SIGTERM)
        term_at = time.monotonic()
        events = await reading
        return events, time.monotonic() - term_at


def _tokens(events: list[SseEvent]) -> int:
    return sum(1 for e in events if '"content": "tok' in e.data)


async def test_r27_a_master_drains_the_streams_it_relays(h: RouterHarness) -> None:
    h.faults["llamacpp"] = "--token-rate 10"
    master, slave = await _pair(h, drain=15)
    events, ran = await _relayed_stream_across_sigterm(master, tokens=25)  # ~2.5 s
    assert events and events[-1].data == "[DONE]", f"the relayed stream was cut: {events[-3:]}"
    assert _tokens(events) == 25
    assert ran > 1.0  # it really ran on after the signal
    assert await master.wait_exit(10) == 0, master.log.read_text()[-2000:]
    assert slave.proc is not None and slave.proc.poll() is None  # only the master stopped


async def test_r27_a_relayed_stream_past_the_drain_deadline_ends_with_an_error_event(
    h: RouterHarness,
) -> None:
    h.faults["llamacpp"] = "--token-rate 10"
    drain = 1.0
    master, _ = await _pair(h, drain=drain)
    events, ran = await _relayed_stream_across_sigterm(master, tokens=300)  # ~30 s
    assert ran < drain + 3.0, f"the stream ran {ran:.2f}s past SIGTERM"
    assert events, "the stream was empty"
    last = events[-1]
    assert last.event == "error", f"no terminal error event: {events[-3:]}"
    error = json.loads(last.data)["error"]
    assert "drain" in error["message"]
    assert all(e.data != "[DONE]" for e in events)
    assert await master.wait_exit(10) == 0, master.log.read_text()[-2000:]
