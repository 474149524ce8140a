"""The one path to a backend: the proxy, how answers reach the client (rewritten or
translated), model-ID rewriting, SSE framing, the model selector, jinja profiles."""

from __future__ import annotations

from router.forwarding.body_selector import body_kind, boundary_of, select_from_body
from router.forwarding.drain import AbortDrain
from router.forwarding.jinja import merge_chat_template_kwargs
from router.forwarding.proxy import Proxy, ProxyResult, UpstreamRequest
from router.forwarding.reply import (
    BodyTransform,
    Reply,
    Rewrite,
    Translation,
    encode_line,
    terminal_error_event,
)
from router.forwarding.rewrite import ModelRewriter, StreamRewriter
from router.forwarding.selector import (
    Selection,
    body_stream,
    read_selector,
    select_from_request_parts,
)
from router.forwarding.sse import Event, SSEParser, encode_event
from router.forwarding.stream_end import error_message, stream_error

__all__ = [
    "AbortDrain",
    "BodyTransform",
    "Event",
    "ModelRewriter",
    "Proxy",
    "ProxyResult",
    "Reply",
    "Rewrite",
    "SSEParser",
    "Selection",
    "StreamRewriter",
    "Translation",
    "UpstreamRequest",
    "body_kind",
    "body_stream",
    "boundary_of",
    "encode_event",
    "encode_line",
    "error_message",
    "merge_chat_template_kwargs",
    "read_selector",
    "select_from_body",
    "select_from_request_parts",
    "stream_error",
    "terminal_error_event",
]
