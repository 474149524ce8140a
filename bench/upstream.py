#!/usr/bin/env python3
"""The benchmark's upstream: a llama-server stand-in that is faster than any proxy in front of it.

The router launches it through a wrapper script set as `llama.binary_path`, with llama-server's
real flags (`-m M --host H --port P --alias A ...`; unknown flags are ignored). Two modes:

- `--bench-mode nginx`: writes an nginx configuration and execs nginx (one worker) that answers
  `/health`, `/props` (with `model_path` = the `-m` path, for the router's identity check),
  `/v1/models`, and every other path with a fixed ~200-byte OpenAI chat completion
  (`return 200`): the instant upstream for latency and requests per second.
- `--bench-mode stream`: an aiohttp server with precomputed frames. Non-streamed requests get the
  same fixed completion. Streamed chat completions emit `max_tokens` SSE chunks whose content is
  the upstream's CLOCK_MONOTONIC time in ns at emission (the clock is system-wide on Linux, so a
  client computes per-event delay exactly). Pacing comes from the request's `seed`, which every
  OpenAI-compatible proxy forwards: seed = rate_tokens_per_s * 10000 + ttft_ms (0: no TTFT,
  as fast as possible).
- `--bench-mode raw`: a bare asyncio protocol (no HTTP library) answering every request with
  the same fixed completion, keep-alive: the instant upstream where nginx is not installed,
  at a few tens of microseconds of CPU per request (bench/profile_proxy.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ANSWER = (
    b'{"id":"chatcmpl-bench","object":"chat.completion","created":0,"model":"fast",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"ok ok ok ok"},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":4,'
    b'"total_tokens":12}}'
)


def parse(argv: list[str]) -> dict[str, str]:
    opts = {"mode": "nginx", "model": "", "host": "127.0.0.1", "port": "8080", "alias": ""}
    flags = {
        "-m": "model",
        "--model": "model",
        "--host": "host",
        "--port": "port",
        "-a": "alias",
        "--alias": "alias",
        "--bench-mode": "mode",
    }
    i = 0
    while i < len(argv):
        name = flags.get(argv[i])
        if name is not None and i + 1 < len(argv):
            opts[name] = argv[i + 1]
            i += 2
        else:
            i += 1
    if not opts["alias"]:
        opts["alias"] = Path(opts["model"]).stem or "fast"
    return opts


def nginx_quote(data: bytes | str) -> str:
    text = data.decode() if isinstance(data, bytes) else data
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def nginx_preamble(prefix: Path) -> str:
    """The part of an nginx.conf every bench arm shares: one worker, files under `prefix`,
    long keep-alive; the caller appends its own `http` body and closes the block."""
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"""{user}worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
"""


def nginx_conf(prefix: Path, opts: dict[str, str]) -> str:
    props = json.dumps({"model_path": opts["model"], "total_slots": 1})
    models = json.dumps(
        {"object": "list", "data": [{"id": opts["alias"], "object": "model", "owned_by": "b"}]}
    )
    return (
        nginx_preamble(prefix)
        + f"""  default_type application/json;
  server {{
    listen {opts["host"]}:{opts["port"]};
    location = /health {{ return 200 '{{"status":"ok"}}'; }}
    location = /props {{ return 200 {nginx_quote(props)}; }}
    location = /v1/models {{ return 200 {nginx_quote(models)}; }}
    location / {{ return 200 {nginx_quote(ANSWER)}; }}
  }}
}}
"""
    )


def exec_nginx(opts: dict[str, str]) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    prefix = Path(tempfile.mkdtemp(prefix="bench-nginx-up-"))
    (prefix / "nginx.conf").write_text(nginx_conf(prefix, opts))
    print("model loaded (nginx upstream)", flush=True)
    os.execv(nginx, [nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf")])


def serve_stream(opts: dict[str, str]) -> None:
    from aiohttp import web

    alias = opts["alias"]
    head = (
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,'
        b'"model":"' + alias.encode() + b'","choices":[{"index":0,"delta":{"content":"'
    )
    tail = b' "},"finish_reason":null}]}\n\n'
    last = (
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"'
        + alias.encode()
        + b'","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
    )
    props = {"model_path": opts["model"], "total_slots": 256}
    models = {"object": "list", "data": [{"id": alias, "object": "model", "owned_by": "b"}]}

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def get_props(_: web.Request) -> web.Response:
        return web.json_response(props)

    async def get_models(_: web.Request) -> web.Response:
        return web.json_response(models)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.Response(body=ANSWER, content_type="application/json")
        n = int(body.get("max_tokens") or 16)
        seed = int(body.get("seed") or 0)
        rate, ttft = seed // 10000, (seed % 10000) / 1000.0
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if ttft:
            await asyncio.sleep(ttft)
        gap = 1.0 / rate if rate else 0.0
        start = time.monotonic()
        mono = time.monotonic_ns
        for i in range(n):
            if gap:
                delay = start + i * gap - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await resp.write(head + str(mono()).encode() + tail)
        await resp.write(last)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/props", get_props)
    app.router.add_get("/v1/models", get_models)
    app.router.add_post("/v1/chat/completions", chat)
    print("model loaded (stream upstream)", flush=True)
    web.run_app(
        app,
        host=opts["host"],
        port=int(opts["port"]),
        print=None,
        access_log=None,
        backlog=1024,
    )


def raw_answer(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


class RawHTTP(asyncio.Protocol):
    """HTTP/1.1 keep-alive, just enough for the router: the request head, then a body of its
    Content-Length; each request answered at once with the fixed answer of its path."""

    def __init__(self, answers: dict[bytes, bytes]) -> None:
        self.answers, self.buf = answers, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].lower()
            at = head.find(b"content-length:")
            size = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buf) < end + 4 + size:
                return
            path = head.split(b" ", 2)[1].split(b"?", 1)[0]
            self.buf = self.buf[end + 4 + size :]
            assert self.transport is not None
            self.transport.write(self.answers.get(path, self.answers[b"*"]))


def serve_raw(opts: dict[str, str]) -> None:
    props = json.dumps({"model_path": opts["model"], "total_slots": 1}).encode()
    models = {"object": "list", "data": [{"id": opts["alias"], "object": "model"}]}
    answers = {
        b"/health": raw_answer(b'{"status":"ok"}'),
        b"/props": raw_answer(props),
        b"/v1/models": raw_answer(json.dumps(models).encode()),
        b"*": raw_answer(ANSWER),
    }

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: RawHTTP(answers), opts["host"], int(opts["port"]), backlog=1024
        )
        print("model loaded (raw upstream)", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(run())


def main() -> None:
    opts = parse(sys.argv[1:])
    if opts["mode"] == "nginx":
        exec_nginx(opts)
    elif opts["mode"] == "raw":
        serve_raw(opts)
    else:
        serve_stream(opts)


if __name__ == "__main__":
    main()
