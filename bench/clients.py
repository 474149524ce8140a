"""Sequential HTTP clients for the real-backend latency arms: http.client and httpx, one
keep-alive connection each, timing every request and the client's own CPU per request.

A client's CPU per request (its thread's CPU time over the block) is the client library's
overhead: it is paid in every arm alike, so differences between arms are unaffected, but it
is part of every absolute number and it competes with the arms for the box's cores.
"""

from __future__ import annotations

import http.client
import json
import statistics
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

HEADER = "X-Router-Overhead-Ms"
Send = Callable[[], tuple[bytes, str | None]]  # one request: (body, overhead header)


def _hc_sender(url: str, path: str, body: bytes) -> tuple[Send, Callable[[], None]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    hdrs = {"Content-Type": "application/json"}

    def send() -> tuple[bytes, str | None]:
        try:
            conn.request("POST", path, body, hdrs)
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionError):
            # nginx ends a keep-alive connection after keepalive_requests (1000): reconnect
            conn.close()
            conn.request("POST", path, body, hdrs)
            resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}{path}: HTTP {resp.status}: {data[:200]!r}")
        return data, resp.getheader(HEADER)

    return send, conn.close


def _httpx_sender(url: str, path: str, body: bytes) -> tuple[Send, Callable[[], None]]:
    import httpx

    client = httpx.Client(base_url=url, timeout=60)
    hdrs = {"Content-Type": "application/json"}

    def send() -> tuple[bytes, str | None]:
        resp = client.post(path, content=body, headers=hdrs)
        if resp.status_code != 200:
            raise RuntimeError(f"{url}{path}: HTTP {resp.status_code}: {resp.content[:200]!r}")
        return resp.content, resp.headers.get(HEADER)

    return send, client.close


def _httpx_error() -> type[Exception]:
    import httpx

    return httpx.HTTPError


CLIENTS = {"http.client": _hc_sender, "httpx": _httpx_sender}


def backend_ms(body: bytes) -> float | None:
    """llama-server's own time for a whole answer (its `timings`), None for a stream."""
    try:
        timings = json.loads(body).get("timings") or {}
    except (ValueError, AttributeError):
        return None
    if "prompt_ms" not in timings:
        return None
    return float(timings["prompt_ms"]) + float(timings.get("predicted_ms", 0.0))


def run_block(client: str, url: str, path: str, body: bytes, seconds: float) -> dict[str, Any]:
    """Sequential requests for `seconds` on one connection; latency to the last byte."""
    send, close = CLIENTS[client](url, path, body)
    try:
        send()  # the connection is open and warm before timing starts
        lat: list[float] = []
        headers: list[float] = []
        backend: list[float] = []
        errors: list[str] = []
        cpu0, deadline = time.thread_time(), time.monotonic() + seconds
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                data, header = send()
            except (RuntimeError, OSError, http.client.HTTPException, _httpx_error()) as exc:
                errors.append(str(exc)[:300])  # counted and shown, not timed
                continue
            lat.append((time.perf_counter() - t0) * 1000.0)
            if header is not None:
                headers.append(float(header))
            own = backend_ms(data)
            if own is not None:
                backend.append(own)
        cpu = time.thread_time() - cpu0
    finally:
        close()
    lat.sort()
    return {
        "client": client,
        "requests": len(lat),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "p50_ms": statistics.median(lat),
        "p99_ms": lat[int(0.99 * (len(lat) - 1))],
        "client_cpu_us": cpu / len(lat) * 1e6,
        "header_p50_ms": statistics.median(headers) if headers else None,
        "backend_p50_ms": statistics.median(backend) if backend else None,
    }
