"""A request for another node's inference route, `/router/v1/node/inference/<path>`: its path
and the headers that go with it. The master's relay (router/inference/relay.py) and
lending's owner side (router/lending/owner.py) address a node the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from router.domain import ANONYMOUS, Caller
from router.edge import CALLER
from router.forwarding import Selection
from router.forwarding.selector import SELECTOR_HEADER
from router.keys import CALLER_HEADER, caller_header

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


@dataclass(frozen=True, slots=True)
class Asked:
    """What a request sent on to another node takes from the client's: its method, its URL
    (path and query) and its headers. Taken once from the aiohttp request (`Asked.of`), so the
    parts that address a node read values, not the request."""

    method: str
    url: URL
    headers: Mapping[str, str]
    caller: Caller = ANONYMOUS  # the scoped key that sent it (its name and class go along)

    @classmethod
    def of(cls, request: web.BaseRequest) -> Asked:
        caller = request.get(CALLER) if isinstance(request, web.Request) else None
        return cls(request.method, request.rel_url, request.headers, caller or ANONYMOUS)

    @property
    def path(self) -> str:
        return self.url.path


def node_headers(asked: Asked, token: str, selection: Selection, local_id: str) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in asked.headers.items():
        if name.lower() in _FORWARDED_HEADERS:
            out.add(name, value)
    if selection.source == "header":
        out[SELECTOR_HEADER] = local_id
    out["Authorization"] = f"Bearer {token}"
    if asked.caller.name:  # the node orders and records it as the key's (never the secret)
        out[CALLER_HEADER] = caller_header(asked.caller)
    return out


def node_path_qs(asked: Asked, selection: Selection, local_id: str) -> str:
    url = asked.url
    if selection.source and selection.source.startswith("query:"):
        url = url.update_query({selection.source.split(":", 1)[1]: local_id})
    return INFERENCE_PREFIX + url.raw_path_qs
