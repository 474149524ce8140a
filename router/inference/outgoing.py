"""What goes to the backend with a forwarded request besides its path: the body (whole, or
streamed: counted against the cap and cut when it stops arriving), the headers, the abort-drain
policy (R23b), and the router's own overhead for the analytics event."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from multidict import CIMultiDict

from router.appkeys import SETTINGS
from router.config import PROGRAM_SECTIONS, ProgramSection, Settings
from router.domain import Family, MiB
from router.edge import upstream_request_headers
from router.errors import PayloadTooLarge, RequestTimeout
from router.forwarding import AbortDrain, ModelRewriter, ProxyResult, Selection, body_stream
from router.records import RequestInfo


def overhead(info: RequestInfo, result: ProxyResult, wait_s: float) -> Callable[[], float]:
    """The router's own time for the analytics event, read when the request is recorded."""

    def overhead_ms() -> float:
        # Everything since arrival except the wait for a runtime and the backend's own time.
        spent = time.monotonic() - info.started - wait_s - (result.ttfb_ms or 0.0) / 1000.0
        return max(0.0, spent * 1000.0)

    return overhead_ms


def abort_drain(settings: Settings, family: Family) -> AbortDrain | None:
    """R23b: drain instead of cancel, for a program configured so."""
    program: ProgramSection = getattr(settings, PROGRAM_SECTIONS[family])
    if not program.drain_on_abort:
        return None
    return AbortDrain(program.abort_drain_bytes, program.abort_drain_timeout)


def body(
    request: web.Request,
    selection: Selection,
    rewriter: ModelRewriter,
    result: ProxyResult,
) -> tuple[bytes | AsyncIterator[bytes] | None, bool]:
    """The body for the backend and whether it can be sent again: whole with its model ID
    rewritten, or (not read whole) streamed on as it arrives."""
    if selection.complete:
        data = rewriter.request_body(selection.prefix) if selection.prefix else b""
        result.bytes_in = len(data)
        return (data if data or request.can_read_body else None), True
    return counted(body_stream(selection, request), *stream_limits(request), result), False


def stream_limits(request: web.Request) -> tuple[int, float]:
    """The cap on a streamed request body and how long it may stop arriving."""
    settings = request.app[SETTINGS]
    cap = int(settings.limits.max_stream_request_gb * 1024 * MiB)
    return cap, settings.server.header_timeout


async def counted(
    chunks: AsyncIterator[bytes], cap: int, idle: float, result: ProxyResult
) -> AsyncIterator[bytes]:
    """The rest of a large body: counted against the cap, and cut when it stops arriving."""
    iterator = aiter(chunks)
    while True:
        try:
            async with asyncio.timeout(idle):
                chunk = await anext(iterator)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise RequestTimeout(f"the request body stalled for {idle:g}s") from None
        result.bytes_in += len(chunk)
        if result.bytes_in > cap:
            raise PayloadTooLarge(
                f"the body is larger than {cap} bytes (limits.max_stream_request_gb)"
            )
        yield chunk


def headers(request: web.Request) -> CIMultiDict[str]:
    """The client's headers as forwarded upstream (router/edge), less `X-Tensors-Model`."""
    return upstream_request_headers(request.headers, extra_drop=("x-tensors-model",))
