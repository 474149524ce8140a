"""Scoped keys managed at run time (docs/configuration.md, "Scoped keys"): create (the
secret in the answer, once), list (never a secret, each key's tokens today), change, revoke.
Each write goes to the store first, then into the live book auth reads, so a revoked key's
next request is refused and a restart keeps what was written."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace

from aiohttp import web

from router.appkeys import KEYS, RECORDER, STORE
from router.domain import Priority
from router.edge import Handler, match_of, read_json
from router.edge.auth import digest
from router.errors import Conflict, NotFound
from router.keys import ScopedKey, changed, new_secret, spec_from, utc_day
from router.keys.model import DAY_SECONDS
from router.store.scoped_keys import KeyRow


async def keys_context(app: web.Application) -> AsyncIterator[None]:
    """Loads the stored keys and today's usage into the book; the recorder charges it."""
    book, store = app[KEYS], app[STORE]
    now = time.time()
    rows = await store.scoped_keys.all()
    used = await store.scoped_keys.tokens_since(utc_day(now) * DAY_SECONDS)
    book.load([_key(r) for r in rows], used, now)
    app[RECORDER].on_tokens = book.charge
    yield
    app[RECORDER].on_tokens = None


async def list_keys(request: web.Request) -> web.StreamResponse:
    book, now = request.app[KEYS], time.time()
    data = [key.view(book.used(key.name, now)) for key in book.keys()]
    return web.json_response({"object": "list", "data": data})


async def create(request: web.Request) -> web.StreamResponse:
    spec = spec_from(await read_json(request, required=True), creating=True)
    secret = new_secret()
    key = changed(ScopedKey(spec["name"], digest(secret), created=time.time()), spec)
    if not await request.app[STORE].scoped_keys.insert(_row(key)):
        raise Conflict(f"a key named '{key.name}' exists (revoked keys keep their names)")
    request.app[KEYS].put(key)
    # The only time the secret leaves the router: it is not stored, so it cannot be shown again.
    return web.json_response({**key.view(0), "secret": secret}, status=201)


async def change(request: web.Request) -> web.StreamResponse:
    book = request.app[KEYS]
    key = _live(request)
    key = changed(key, spec_from(await read_json(request, required=True), creating=False))
    if not await request.app[STORE].scoped_keys.update(_row(key)):
        raise NotFound(f"no live key named '{key.name}'")
    book.put(key)
    return web.json_response(key.view(book.used(key.name, time.time())))


async def revoke(request: web.Request) -> web.StreamResponse:
    key = _live(request)
    now = time.time()
    await request.app[STORE].scoped_keys.revoke(key.name, now)
    request.app[KEYS].put(replace(key, revoked=now))
    return web.json_response({"name": key.name, "revoked": now})


def _live(request: web.Request) -> ScopedKey:
    name = match_of(request).params.get("name", "")
    key = request.app[KEYS].get(name)
    if key is None or key.revoked is not None:
        raise NotFound(f"no live key named '{name}'")
    return key


def _row(key: ScopedKey) -> KeyRow:
    return KeyRow(
        key.name,
        key.digest,
        key.models,
        key.priority.value,
        key.max_concurrent,
        key.daily_tokens,
        key.created,
        key.revoked,
    )


def _key(row: KeyRow) -> ScopedKey:
    return ScopedKey(
        row.name,
        row.digest,
        row.models,
        Priority(row.priority),
        row.max_concurrent,
        row.daily_tokens,
        row.created,
        row.revoked,
    )


HANDLERS: dict[str, Handler] = {
    "keys.list": list_keys,
    "keys.create": create,
    "keys.change": change,
    "keys.revoke": revoke,
}
