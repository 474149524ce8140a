"""What the edge attaches to a request before a handler runs: when it arrived (stamped by
`errors.edge_errors`) and the route table's match (its Route and path parameters). The match
keys are defined here, where the edge sets them; appkeys re-exports them."""

from __future__ import annotations

import time

from aiohttp import web

from router.classify import Match, Route
from router.domain import ANONYMOUS, Caller
from router.edge.caller import CALLER, SCOPED_KEY
from router.edge.errors import ARRIVED
from router.keys import ScopedKey

MATCH: web.RequestKey[Match] = web.RequestKey("match", Match)
ROUTE: web.RequestKey[Route] = web.RequestKey("route", Route)


def match_of(request: web.Request) -> Match:
    return request[MATCH]


def matched_route(request: web.Request) -> Route:
    return match_of(request).route


def arrived(request: web.Request) -> float:
    """When the edge saw the request (monotonic); now for requests built outside the edge."""
    return request.get(ARRIVED) or time.monotonic()


def caller_of(request: web.Request) -> Caller:
    """The caller that auth identified (a scoped key), or ANONYMOUS."""
    caller = request.get(CALLER)
    return caller if caller is not None else ANONYMOUS


def scoped_key_of(request: web.Request) -> ScopedKey | None:
    """The scoped key that authenticated the request, if one did."""
    return request.get(SCOPED_KEY)


def may_use(request: web.Request, model: str) -> bool:
    """Whether the request's scoped key (if any) may use `model`: what model lists show it."""
    key = request.get(SCOPED_KEY)
    return key is None or key.allows(model)
