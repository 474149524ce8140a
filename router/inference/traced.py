"""The pipeline's spans (docs/observability.md, "Traces"): the SERVER span of a routed request,
the CLIENT span of the call to a backend (named and attributed by the OpenTelemetry GenAI
conventions) and of a hop to another node. The queue wait, the load and the KV restore are
spanned by the runtime (router/runtime/load_trace.py, kvcache.py).

Never prompt or answer text: the backend span reads token counts from the answer's last bytes,
the ones the analytics row reads its usage from, and only when traces are on.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from urllib.parse import urlsplit

from aiohttp import web

from router.appkeys import PROXY
from router.edge import trace_header
from router.forwarding import ProxyResult, Translation, UpstreamRequest
from router.records import RequestInfo
from router.store.rows import sniff_usage
from router.tracing import NO_SPAN, Attribute, Attributes, Span, tracer

OWN = "tensor_router."  # the project's attributes: no invented gen_ai.* keys

# The backend path's operation (gen_ai.operation.name); anything else generates content.
_OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "text_completion",
    "/completions": "text_completion",
    "/completion": "text_completion",
    "/v1/embeddings": "embeddings",
    "/embeddings": "embeddings",
    "/embedding": "embeddings",
    "/api/chat": "chat",
    "/api/generate": "text_completion",
    "/api/embed": "embeddings",
    "/api/embeddings": "embeddings",
}
_TIMINGS = re.compile(rb'"(prompt_n|cache_n|predicted_n|cached_tokens)"\s*:\s*(\d+)')


@contextlib.asynccontextmanager
async def routed(request: web.Request, info: RequestInfo) -> AsyncIterator[Span]:
    """The SERVER span of one routed request, continuing the caller's `traceparent`; its
    trace id goes on the answer (`X-Trace-Id`) and on the analytics row."""
    traces = tracer()
    if not traces.enabled:
        yield NO_SPAN
        return
    attributes: Attributes = {
        "http.request.method": request.method,
        "http.route": info.route,
        OWN + "surface": info.surface,
    }
    with traces.server(f"{request.method} {info.route}", request.headers, attributes) as span:
        info.trace_id = span.trace_id  # formatted once: the row and the header share it
        trace_header.note(request, info.trace_id)
        yield span


def answered(span: Span, info: RequestInfo, result: ProxyResult) -> None:
    """The routed request's outcome: a server error (5xx) fails its span, a refusal does not."""
    status = result.status or 500
    found: dict[str, Attribute] = {"http.response.status_code": status}
    if info.model is not None:
        found[OWN + "model"] = info.model
    span.update(found)
    if status >= 500:
        span.fail(str(status), result.error_message)


def operation(path: str) -> str:
    return _OPERATIONS.get(path.split("?", 1)[0], "generate_content")


@contextlib.contextmanager
def backend_call(
    headers: MutableMapping[str, str], url: str, model: str, provider: str | None
) -> Iterator[Span]:
    """The CLIENT span of one call to a backend, its `traceparent` injected into `headers`
    (vLLM continues the trace; llama-server and the others ignore it)."""
    traces = tracer()
    if not traces.enabled:
        yield NO_SPAN
        return
    name, attributes = _call(url, model, provider)
    with traces.client(name, headers, attributes) as span:
        yield span


@functools.lru_cache(maxsize=256)
def _call(url: str, model: str, provider: str | None) -> tuple[str, Attributes]:
    """A backend call's span name and attributes: the same for every call to one URL, so
    parsed once (the SDK copies them into each span; the dict is never changed)."""
    parts = urlsplit(url)
    op = operation(parts.path)
    attributes: Attributes = {
        "gen_ai.operation.name": op,
        "gen_ai.provider.name": f"tensor_router.{provider or 'backend'}",
        "gen_ai.request.model": model,
        "server.address": parts.hostname or "",
        "server.port": parts.port or 80,
    }
    return f"{op} {model}", attributes


async def called(
    request: web.Request,
    upstream: UpstreamRequest,
    translation: Translation,
    result: ProxyResult,
    overhead_ms: Callable[[], float],
    model: str,
    provider: str,
) -> web.StreamResponse:
    """The proxy's call to a backend inside its CLIENT span (ended once the answer has been
    passed on); `upstream.headers` must be the mutable headers it sends (the span is
    injected there, before the request leaves)."""
    headers = upstream.headers
    assert isinstance(headers, MutableMapping)
    with backend_call(headers, upstream.url, model, provider) as span:
        try:
            return await request.app[PROXY].forward(
                request, upstream, translation, result, overhead_ms
            )
        finally:
            backend_answered(span, result)


def usage(tail: bytes) -> dict[str, int]:
    """The GenAI usage attributes from an answer's last bytes: llama-server's `timings`
    (`prompt_n` new, `cache_n` cached, `predicted_n` out) when present, else the usage report
    (OpenAI's `cached_tokens` as the cached part). Input tokens include the cached ones."""
    timings = {name.decode(): int(value) for name, value in _TIMINGS.findall(tail)}
    found: dict[str, int] = {}
    if "prompt_n" in timings and "cache_n" in timings:
        found["gen_ai.usage.input_tokens"] = timings["prompt_n"] + timings["cache_n"]
        found["gen_ai.usage.cache_read.input_tokens"] = timings["cache_n"]
        if "predicted_n" in timings:
            found["gen_ai.usage.output_tokens"] = timings["predicted_n"]
        return found
    reported = sniff_usage(tail)
    if "prompt_tokens" in reported:
        found["gen_ai.usage.input_tokens"] = reported["prompt_tokens"]
    if "completion_tokens" in reported:
        found["gen_ai.usage.output_tokens"] = reported["completion_tokens"]
    if "cached_tokens" in timings:
        found["gen_ai.usage.cache_read.input_tokens"] = timings["cached_tokens"]
    return found


def backend_answered(span: Span, result: ProxyResult) -> None:
    """What the backend span learns from the answer: status, usage, time to first chunk."""
    if not tracer().enabled:
        return
    found: dict[str, Attribute] = {"gen_ai.request.stream": result.stream}
    if result.upstream_status is not None:
        found["http.response.status_code"] = result.upstream_status
    found.update(usage(result.tail))
    first = first_chunk_ms(result)
    if first is not None:
        found["gen_ai.response.time_to_first_chunk"] = first / 1000.0
    span.update(found)
    if result.upstream_status is not None and result.upstream_status >= 400:
        span.fail(str(result.upstream_status), None)
    elif result.error_message is not None:
        span.fail("_OTHER", result.error_message)


def first_chunk_ms(result: ProxyResult) -> float | None:
    """A streamed answer's first chunk as the client got it (None when none reached it); a
    whole answer is one chunk, whose head comes when it is done: its headers' time."""
    return result.first_chunk_ms if result.stream else result.ttfb_ms


@contextlib.contextmanager
def hop(
    name: str, headers: MutableMapping[str, str], node: str, attributes: Attributes | None = None
) -> Iterator[Span]:
    """The CLIENT span of a relay or lending hop to another node, injected as the parent of
    what that node does for the request."""
    traces = tracer()
    if not traces.enabled:
        yield NO_SPAN
        return
    with traces.client(name, headers, {OWN + "node": node, **(attributes or {})}) as span:
        yield span
