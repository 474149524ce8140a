"""A request for another node's inference route, `/router/v1/node/inference/<path>`: its path
and the headers that go with it. The master's relay (router/inference/relay.py) and
lending's owner side (router/lending/owner.py) address a node the same way.
"""

from __future__ import annotations

from aiohttp import web
from multidict import CIMultiDict

from router.forwarding import Selection
from router.forwarding.selector import SELECTOR_HEADER

INFERENCE_PREFIX = "/router/v1/node/inference"

# Request headers that carry meaning for the work itself; everything else stays on this hop.
_FORWARDED_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "content-encoding",
        "content-language",
        "content-type",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
        "range",
        "user-agent",
        "x-request-id",
    }
)


def node_headers(
    request: web.Request, token: str, selection: Selection, local_id: str
) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in request.headers.items():
        if name.lower() in _FORWARDED_HEADERS:
            out.add(name, value)
    if selection.source == "header":
        out[SELECTOR_HEADER] = local_id
    out["Authorization"] = f"Bearer {token}"
    return out


def node_path_qs(request: web.Request, selection: Selection, local_id: str) -> str:
    url = request.rel_url
    if selection.source and selection.source.startswith("query:"):
        url = url.update_query({selection.source.split(":", 1)[1]: local_id})
    return INFERENCE_PREFIX + url.raw_path_qs
