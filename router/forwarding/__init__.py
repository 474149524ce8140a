"""The one path to a backend: the proxy, model-ID rewriting, the model selector, jinja profiles."""

from __future__ import annotations

from router.forwarding.jinja import merge_chat_template_kwargs
from router.forwarding.proxy import Proxy, ProxyResult, UpstreamRequest
from router.forwarding.rewrite import ModelRewriter, StreamRewriter
from router.forwarding.selector import (
    Selection,
    body_kind,
    body_stream,
    boundary_of,
    read_selector,
    select_from_body,
    select_from_request_parts,
)

__all__ = [
    "ModelRewriter",
    "Proxy",
    "ProxyResult",
    "Selection",
    "StreamRewriter",
    "UpstreamRequest",
    "body_kind",
    "body_stream",
    "boundary_of",
    "merge_chat_template_kwargs",
    "read_selector",
    "select_from_body",
    "select_from_request_parts",
]
