"""Traces: the latency the router adds with traces on against off (issue 36; target: on at
most 0.1 ms more than off, p50).

Two routers over the same kind of instant upstream (bench/upstream.py), one with
OTEL_EXPORTER_OTLP_ENDPOINT set to an OTLP/HTTP sink in this process (it reads and answers
every export, so the batch processor really encodes and sends), one without any OTEL_*
variable. One connection, small non-streamed chat completions; each arm's added p50 is its p50
less its own upstream's direct p50 within the same repetition, the arms interleaved.
"""

from __future__ import annotations

import http.server
import os
import threading
import time
from typing import Any

from bench import common as c
from bench.common import Router, write_wrapper
from bench.latency import header_overhead

PATH = "/v1/chat/completions"
ARMS = ("off_direct", "off", "on_direct", "on")


class _Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that keeps nothing but counts: exports answered at once."""

    received = {"exports": 0, "bytes": 0}

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        size = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(size)
        _Sink.received["exports"] += 1
        _Sink.received["bytes"] += size
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return None


def span_cpu_us(n: int) -> float:
    """CPU microseconds the spans of one served request cost in-process (what a request that
    is granted its lease at once makes: the server span continuing a traceparent, the backend
    span with its attributes and injection), batched to an exporter that drops them. CPU time,
    not wall time: it holds on a busy machine where the HTTP arms do not."""
    from multidict import CIMultiDict
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from router.tracing import Kind, otel

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer = otel.tracer_for(BatchSpanProcessor(Dropped()))
    inbound = CIMultiDict({"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"})
    route = {"http.request.method": "POST", "http.route": PATH}
    call = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "fast", "server.port": 1}

    def one() -> None:
        with tracer.server(f"POST {PATH}", inbound, route) as server:
            with tracer.span("chat fast", kind=Kind.CLIENT, attributes=call) as backend:
                tracer.inject(CIMultiDict(inbound))
                backend.set("gen_ai.usage.input_tokens", 5)
                backend.set("gen_ai.usage.output_tokens", 7)
            server.set("http.response.status_code", 200)

    for _ in range(n // 10):
        one()
    started = time.process_time()
    for _ in range(n):
        one()
    spent = time.process_time() - started
    tracer.close()
    return spent / n * 1e6


def _router(stack: c.Stack, wd: Any, name: str, env: dict[str, str]) -> tuple[str, str]:
    """A router over its own instant upstream: (router URL, direct URL)."""
    mode = "nginx" if c.nginx_path() else "stream"
    folder = wd / name
    folder.mkdir()
    model = folder / "fast.gguf"
    model.write_bytes(b"GGUF-bench")
    router = Router(folder / "router", {"fast": model}, write_wrapper(folder / "up", mode), env=env)
    stack.callback(router.stop)
    router.start()
    router.load("fast")
    return router.url, f"http://127.0.0.1:{router.backend('fast')['port']}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    traced = {**plain, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_port}"}
    with c.workdir("traces") as wd, c.Stack() as stack:
        stack.callback(sink.shutdown)
        urls: dict[str, str] = {}
        urls["off"], urls["off_direct"] = _router(stack, wd, "off", plain)
        urls["on"], urls["on_direct"] = _router(stack, wd, "on", traced)
        for arm in ARMS:  # warm-up
            c.load_test(urls[arm] + PATH, c.CHAT_BODY, 1, 1)

        def run(arm: str, rep: int) -> dict[str, Any]:
            return c.load_test(urls[arm] + PATH, c.CHAT_BODY, 1, opts.block)

        results = c.interleave(ARMS, opts.reps, run)
        n = 200 if opts.quick else 1000
        own = {arm: header_overhead(urls[arm], n) for arm in ("off", "on")}
    cpu_us = span_cpu_us(5000 if opts.quick else 20000)
    added = {
        arm: c.per_rep(results, arm, f"{arm}_direct", "p50_ms", c.diff) for arm in ("off", "on")
    }
    on_minus_off = [
        (on["p50_ms"] - on_d["p50_ms"]) - (off["p50_ms"] - off_d["p50_ms"])
        for on, on_d, off, off_d in zip(
            results["on"], results["on_direct"], results["off"], results["off_direct"], strict=True
        )
    ]
    data = {
        "client": c.client_name(),
        "connections": 1,
        "summary": {
            "added_p50_ms": added,
            "on_minus_off_p50_ms": c.med(on_minus_off),
            "exports": dict(_Sink.received),
            # The router's own time (X-Router-Overhead-Ms): no upstream or client in it.
            "own_p50_ms": {arm: own[arm]["p50_ms"] for arm in own},
            "span_cpu_us_per_request": cpu_us,
        },
        "blocks": results,
    }
    c.save(opts, "traces", data)
    return data


def report_lines(d: dict[str, Any]) -> list[str]:
    if "summary" not in d:
        return ["", f"Traces: {d.get('crashed', '')[-300:]}"]
    s = d["summary"]
    added = s["added_p50_ms"]

    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    verdict = s["on_minus_off_p50_ms"] is not None and s["on_minus_off_p50_ms"] <= 0.1
    return [
        "",
        "### Traces on and off (1 connection, instant upstream)",
        "",
        "| Arm | Router-added p50 ms | X-Router-Overhead-Ms p50 |",
        "|---|---|---|",
        f"| traces off | {ms(added['off'])} | {ms(s['own_p50_ms']['off'])} |",
        f"| traces on (OTLP/HTTP to a local sink) | {ms(added['on'])} |"
        f" {ms(s['own_p50_ms']['on'])} |",
        "",
        f"On minus off, median of per-repetition differences: "
        f"{ms(s['on_minus_off_p50_ms'])} ms (target <= 0.1 ms: {'met' if verdict else 'MISSED'});"
        f" the sink took {s['exports']['exports']} exports, {s['exports']['bytes']} bytes."
        f" The spans' own CPU per request, in process: {s['span_cpu_us_per_request']:.0f} us.",
    ]


if __name__ == "__main__":
    main()
