"""End to end over the wire: a `tensor-router start` process with OTEL_EXPORTER_OTLP_ENDPOINT
set exports its spans over OTLP/HTTP to a receiver this test runs, which decodes them with
opentelemetry-proto. The batch processor's schedule is set beyond the test, so the spans arrive
only because a graceful stop flushes them."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.support.harness import RouterHarness, chat
from tests.support.router_process import new_router


class Receiver:
    """An OTLP/HTTP trace receiver: what arrived on POST /v1/traces, decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.arrived = asyncio.Event()

    async def traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        decoded = ExportTraceServiceRequest()
        decoded.ParseFromString(await request.read())
        self.requests.append(decoded)
        self.arrived.set()
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def spans(self) -> list[tuple[str, Span]]:
        """(service.name, span) of everything received."""
        out: list[tuple[str, Span]] = []
        for decoded in self.requests:
            for resource_spans in decoded.resource_spans:
                attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    out += [(attrs.get("service.name", ""), s) for s in scope.spans]
        return out


@contextlib.asynccontextmanager
async def receiving(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Receiver]:
    """A receiver on loopback, the OTLP endpoint of every router the test starts inside."""
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.traces)
    async with TestServer(app, host="127.0.0.1") as sink:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", str(sink.make_url("/")))
        yield receiver


async def test_a_stopping_router_exports_its_spans_over_otlp_http(
    tmp_harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with receiving(monkeypatch) as receiver:
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # only the stop's flush sends
        tmp_harness.model("m1")
        router = new_router(tmp_harness)
        await router.start()
        async with httpx.AsyncClient(base_url=router.base, timeout=30) as client:
            answer = await client.post("/v1/chat/completions", json=chat("m1", max_tokens=2))
        assert answer.status_code == 200, answer.text
        trace_id = answer.headers["X-Trace-Id"]
        assert not receiver.arrived.is_set()  # batched: nothing sent yet
        assert router.proc is not None
        router.proc.send_signal(signal.SIGTERM)
        assert await router.wait_exit(30) == 0
        await asyncio.wait_for(receiver.arrived.wait(), 10)
    found = [(service, s) for service, s in receiver.spans() if s.trace_id.hex() == trace_id]
    assert {service for service, _ in found} == {"tensor-router"}
    kinds = {s.name: s.kind for _, s in found}
    assert kinds["POST /v1/chat/completions"] == Span.SPAN_KIND_SERVER
    assert kinds["chat m1"] == Span.SPAN_KIND_CLIENT
    assert {"queue wait", "model load"} <= kinds.keys()
