"""What the edge attaches to a request before a handler runs: when it arrived (stamped by
`errors.edge_errors`) and the route table's match (its Route and path parameters). The match
keys are defined here, where the edge sets them; appkeys re-exports them."""

from __future__ import annotations

import time

from aiohttp import web

from router.classify import Match, Route
from router.domain import ANONYMOUS, Caller
from router.edge.errors import ARRIVED

MATCH: web.RequestKey[Match] = web.RequestKey("match", Match)
ROUTE: web.RequestKey[Route] = web.RequestKey("route", Route)
# Set by auth when a scoped key authenticated the request (router/edge/auth.py).
CALLER: web.RequestKey[Caller] = web.RequestKey("caller", Caller)


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
