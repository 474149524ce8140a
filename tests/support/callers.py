"""A test-only seam that names a request's caller (router.domain.Caller) from a header.

Scoped keys (issue 35, part A) set `request[CALLER]` in auth from the key that authenticated
the request; the fair-queue tests use those (tests/runtime/test_fair_status.py,
tests/real/test_fair_queue_real.py). The benchmark (bench/fair_queue.py) names its callers
with this innermost middleware instead, installed only there
(`RouterHarness.start(middlewares=[set_caller])`), after auth, so auth itself is neither changed
nor weakened; creating scoped keys through the admin API can replace it."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from router.domain import Caller, Priority
from router.edge import CALLER

HEADER = "X-Test-Caller"


def as_header(caller: Caller) -> dict[str, str]:
    """The header that makes `set_caller` name `caller`: `name;class;cap`."""
    cap = "" if caller.max_concurrent is None else str(caller.max_concurrent)
    return {HEADER: f"{caller.name};{caller.priority.value};{cap}"}


@web.middleware
async def set_caller(request: web.Request, handler: Handler) -> web.StreamResponse:
    raw = request.headers.get(HEADER)
    if raw:
        name, priority, cap = raw.split(";")
        request[CALLER] = Caller(name, Priority(priority), int(cap) if cap else None)
    return await handler(request)
