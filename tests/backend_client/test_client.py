"""BackendClient against a real HTTP server on loopback (the seam): the error mapping, the
per-call deadline and the bounded call's event, each with the exact value a caller relies on."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from router.backend_client import BackendClient, BackendFault, Outcome
from router.records import EventBus


class Rig:
    def __init__(self, client: BackendClient, base: str, seen: list[dict[str, Any]]) -> None:
        self.client, self.base, self.seen = client, base, seen


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(30)
    return web.json_response({})


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    app = web.Application()
    app.router.add_get("/ok", lambda _: web.json_response({"a": 1}))
    app.router.add_post("/empty", lambda _: web.Response(status=200))
    app.router.add_get("/text", lambda _: web.Response(text="<html>"))
    app.router.add_post("/refuse", lambda _: web.Response(status=503, text="busy loading"))
    app.router.add_get("/slow", _slow)
    events, seen = EventBus(), []
    events.subscribe_callback(seen.append)
    async with aiohttp.ClientSession() as session, TestServer(app) as server:
        base = str(server.make_url("")).rstrip("/")
        yield Rig(BackendClient(session, events), base, seen)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_answers_and_refusals_map_to_one_fault(rig: Rig) -> None:
    assert await rig.client.call("GET", rig.base + "/ok") == {"a": 1}
    assert (await rig.client.expect("POST", rig.base + "/empty")).body == b""
    with pytest.raises(BackendFault) as refused:
        await rig.client.call("POST", rig.base + "/refuse?x=1", {"b": 2})
    assert refused.value.message == "POST /refuse?x=1 answered 503: busy loading"
    assert (refused.value.backend_status, refused.value.status) == (503, 502)
    with pytest.raises(BackendFault, match="not JSON: <html>"):
        await rig.client.call("GET", rig.base + "/text")
    reply = await rig.client.fetch("POST", rig.base + "/refuse")  # fetch passes any status on
    assert (reply.status, reply.body, reply.ok) == (503, b"busy loading", False)


async def test_a_backend_that_is_gone_or_slow_is_a_fault(rig: Rig) -> None:
    with pytest.raises(BackendFault) as gone:
        await rig.client.fetch("GET", f"http://127.0.0.1:{_closed_port()}/ok")
    assert gone.value.message.startswith("the backend connection failed: ")
    assert gone.value.backend_status is None
    with pytest.raises(BackendFault, match="did not answer in time"):
        await rig.client.fetch("GET", rig.base + "/slow", deadline=0.2)


async def test_bounded_publishes_one_event_and_never_raises(rig: Rig) -> None:
    who = {"runtime": "m@text", "model": "m"}

    async def ok() -> Outcome:
        return "ok", {"slots": 2}

    async def refused() -> Outcome:
        await rig.client.call("POST", rig.base + "/refuse")
        return "ok", {}

    async def slow() -> Outcome:
        await rig.client.fetch("GET", rig.base + "/slow")
        return "ok", {}

    async def crashes() -> Outcome:
        raise KeyError("bug")

    assert await rig.client.bounded("kv_cache", who, "save", ok, 5.0) == ("ok", {"slots": 2})
    assert await rig.client.bounded("kv_cache", who, "save", refused, 5.0) is None
    assert await rig.client.bounded("kv_cache", who, "restore", slow, 0.2) is None
    done = await rig.client.bounded("vllm_sleep", who, "wake", slow, 0.2, timeout_result="failed")
    assert done is None
    assert await rig.client.bounded("kv_cache", who, "probe", crashes, 5.0) is None
    got = [{k: v for k, v in e.items() if k not in ("id", "time", "ms")} for e in rig.seen]
    base = {"runtime": "m@text", "model": "m"}
    assert got == [
        {"event": "kv_cache", **base, "action": "save", "result": "ok", "slots": 2},
        {
            "event": "kv_cache",
            **base,
            "action": "save",
            "result": "failed",
            "reason": "POST /refuse answered 503: busy loading",
        },
        {
            "event": "kv_cache",
            **base,
            "action": "restore",
            "result": "timeout",
            "reason": "no answer within 0.2s",
        },
        {
            "event": "vllm_sleep",
            **base,
            "action": "wake",
            "result": "failed",
            "reason": "no answer within 0.2s",
        },
        {"event": "kv_cache", **base, "action": "probe", "result": "failed", "reason": "KeyError"},
    ]
    assert all(isinstance(e["ms"], float) for e in rig.seen)
