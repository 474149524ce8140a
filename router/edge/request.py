"""What the edge attaches to a request before a handler runs: when it arrived and the route
table's match (its Route and path parameters). Defined here, where they are set; appkeys
re-exports the keys."""

from __future__ import annotations

import time

from aiohttp import web

from router.classify import Match, Route

ARRIVED: web.RequestKey[float] = web.RequestKey("arrived", float)
MATCH: web.RequestKey[Match] = web.RequestKey("match", Match)
ROUTE: web.RequestKey[Route] = web.RequestKey("route", Route)


def match_of(request: web.Request) -> Match:
    return request[MATCH]


def matched_route(request: web.Request) -> Route:
    return match_of(request).route


def arrived(request: web.Request) -> float:
    """When the edge saw the request (monotonic); now for requests built outside the edge."""
    return request.get(ARRIVED) or time.monotonic()
