"""Who sent a request, as auth found it: the request keys it sets when a scoped key
authenticated the request (router/edge/auth.py), read through router/edge/request.py."""

from __future__ import annotations

from aiohttp import web

from router.domain import Caller
from router.keys import ScopedKey

# Set by auth when a scoped key authenticated the request (router/edge/auth.py).
CALLER: web.RequestKey[Caller] = web.RequestKey("caller", Caller)
# ... and the scoped key itself, which admission reads (its models and quota).
SCOPED_KEY: web.RequestKey[ScopedKey] = web.RequestKey("scoped_key", ScopedKey)


def attach(request: web.Request, key: ScopedKey) -> None:
    """The scoped key that authenticated the request: its caller for the queue, itself for
    admission (router/inference/admission.py)."""
    request[SCOPED_KEY] = key
    request[CALLER] = key.caller
