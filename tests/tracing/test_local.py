"""One trace per request on this node: the server span of the route, its queue wait, the load
it starts (with its stages), the backend call as a GenAI CLIENT span whose traceparent the
backend receives, the trace id on the answer and on the analytics row."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from opentelemetry.trace import SpanKind, StatusCode

from router.appkeys import STORE
from tests.support.harness import RouterHarness, chat
from tests.tracing.conftest import Spans, chain, id_of, trace_of

CHAT = "/v1/chat/completions"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


async def _stored_trace_ids(harness: RouterHarness) -> list[str | None]:
    assert harness.app is not None
    await harness.app[STORE].flush()
    path = Path(harness.app[STORE].path)
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute("SELECT trace_id FROM analytics_events ORDER BY id")]


async def test_a_cold_chat_is_one_tree_continuing_the_callers_trace(
    harness: RouterHarness, spans: Spans
) -> None:
    harness.model("m1")
    records = harness.tmp / "requests.jsonl"
    # A load long enough to print its progress: the load span's stages.
    harness.faults["llamacpp"] = (
        f"--record-requests {records} --startup-delay 0.4 --progress-every 0.1"
    )
    client = await harness.start()
    answer = await client.post(CHAT, json=chat("m1", max_tokens=4), headers={"traceparent": CALLER})
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-Trace-Id"] == CALLER_TRACE

    found = await spans.until(lambda f: any(s.kind is SpanKind.SERVER for s in f))
    server = next(s for s in found if s.kind is SpanKind.SERVER)
    assert trace_of(server) == CALLER_TRACE
    assert server.parent is not None and server.parent.span_id == 0x00F067AA0BA902B7
    assert server.name == f"POST {CHAT}"
    assert server.attributes is not None
    assert server.attributes["http.route"] == CHAT
    assert server.attributes["http.response.status_code"] == 200
    assert server.status.status_code is not StatusCode.ERROR

    backend = next(s for s in found if s.kind is SpanKind.CLIENT)
    assert backend.name == "chat m1"
    assert chain(backend, found) == ["chat m1", f"POST {CHAT}"]
    load = spans.named("model load")[0]
    assert chain(load, found) == ["model load", "queue wait", f"POST {CHAT}"]
    assert {trace_of(s) for s in found} == {CALLER_TRACE}
    assert load.attributes is not None and load.attributes["tensor_router.model"] == "m1"
    stages = [e for e in load.events if e.name == "load stage"]
    assert stages and all(e.attributes and e.attributes["phase"] for e in stages)

    # The backend got the router's own span as its parent, never the caller's header.
    sent = [r for r in harness.records(records) if r.get("path") == CHAT]
    assert sent[-1]["traceparent"] == f"00-{CALLER_TRACE}-{id_of(backend)}-01"
    assert await _stored_trace_ids(harness) == [CALLER_TRACE]


async def test_a_request_without_traceparent_starts_a_trace_of_its_own(
    harness: RouterHarness, spans: Spans
) -> None:
    harness.model("m1")
    client = await harness.start()
    first, second = await asyncio.gather(
        client.post(CHAT, json=chat("m1", max_tokens=2)),
        client.post(CHAT, json=chat("m1", max_tokens=2), headers={"traceparent": "garbage"}),
    )
    assert first.status_code == second.status_code == 200
    ids = {first.headers["X-Trace-Id"], second.headers["X-Trace-Id"]}
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)
    found = await spans.until(lambda f: sum(s.kind is SpanKind.SERVER for s in f) == 2)
    assert {trace_of(s) for s in found if s.kind is SpanKind.SERVER} == ids
    assert all(s.parent is None for s in found if s.kind is SpanKind.SERVER)


async def test_a_refusal_is_no_server_error_and_a_backend_failure_is(
    harness: RouterHarness, spans: Spans
) -> None:
    harness.model("m1")
    # The stream ends with llama-server's error event ("Context size has been exceeded.").
    harness.faults["llamacpp"] = "--error-after-tokens 1"
    client = await harness.start()
    refused = await client.post(CHAT, json=chat("nope"))
    assert refused.status_code == 404 and "X-Trace-Id" in refused.headers
    cut = await client.post(CHAT, json=chat("m1", stream=True, max_tokens=4))
    assert cut.status_code == 200
    found = await spans.until(lambda f: sum(s.kind is SpanKind.SERVER for s in f) == 2)
    servers = {
        s.attributes["http.response.status_code"]: s
        for s in found
        if s.kind is SpanKind.SERVER and s.attributes
    }
    assert servers[404].status.status_code is not StatusCode.ERROR
    assert servers[502].status.status_code is StatusCode.ERROR
    backend = next(s for s in found if s.kind is SpanKind.CLIENT)
    assert backend.status.status_code is StatusCode.ERROR
    assert backend.attributes is not None and backend.attributes["error.type"] == "_OTHER"
    assert backend.attributes["gen_ai.request.stream"] is True
    assert backend.attributes["gen_ai.response.time_to_first_chunk"] > 0


FIRST_CHUNK_S = 0.5  # the fake backend's wait before its first token (--ttft)


async def test_time_to_first_chunk_is_when_the_first_bytes_reach_the_client(
    harness: RouterHarness, spans: Spans
) -> None:
    """The backend sends a streamed answer's headers at once and its first chunk after
    FIRST_CHUNK_S (a completions stream has no role-only chunk before the tokens): taken at
    the headers, the attribute would be a few milliseconds. A whole answer is one chunk, sent
    when it is done: its headers' time."""
    harness.model("m1")
    harness.faults["llamacpp"] = f"--ttft {FIRST_CHUNK_S}"
    client = await harness.start()
    body = {"model": "m1", "prompt": "hi", "max_tokens": 2}
    streamed = await client.post("/v1/completions", json={**body, "stream": True})
    assert streamed.status_code == 200 and "tok0" in streamed.text
    whole = await client.post("/v1/completions", json=body)
    assert whole.status_code == 200, whole.text
    found = await spans.until(lambda f: sum(s.kind is SpanKind.CLIENT for s in f) == 2)
    calls = {
        s.attributes["gen_ai.request.stream"]: s.attributes
        for s in found
        if s.kind is SpanKind.CLIENT and s.attributes
    }
    assert calls[True]["gen_ai.response.time_to_first_chunk"] >= FIRST_CHUNK_S
    assert calls[False]["gen_ai.response.time_to_first_chunk"] >= FIRST_CHUNK_S
