"""Admission of a scoped key's request (docs/configuration.md, "Scoped keys"): a model
outside the key's list is a 403 naming it, a used-up daily token quota a 429 with
`Retry-After`. Raised inside the recorded block, so a refusal is an analytics row of the key
and is rendered in the route's surface's shape. The concurrency cap is no refusal: the key's
extra requests wait in the queue (router/runtime reads `Caller.max_concurrent`)."""

from __future__ import annotations

import time

from aiohttp import web

from router.appkeys import KEYS
from router.edge import scoped_key_of


def admit(request: web.Request, model: str | None) -> None:
    key = scoped_key_of(request)
    if key is not None:
        request.app[KEYS].admit(key, model, time.time())
