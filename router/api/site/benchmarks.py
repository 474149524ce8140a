"""`GET /router/v1/benchmarks` and `POST /router/v1/benchmarks/run` (admin), and the service's
place in the app's lifetime.

Both take a `node_id` (default: this node); another node is a 404 until the cluster layer
forwards runs to the registered node. `POST .../run` answers when the run has finished, with
its record; a client that goes away does not stop it (the run is stored and published).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from router.appkeys import BENCHMARKS, CATALOG, EVENTS, RUNTIMES, SETTINGS, STORE
from router.benchmarks import benchmarks_service, listing, parse_run_request
from router.edge import Handler, addressed_node, read_json
from router.errors import BadRequest, ModelNotFound

DEFAULT_HISTORY = 20
MAX_HISTORY = 200


def _history_limit(request: web.Request) -> int:
    raw = request.query.get("limit")
    if raw in (None, ""):
        return DEFAULT_HISTORY
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("limit must be an integer", param="limit") from None
    if not 1 <= value <= MAX_HISTORY:
        raise BadRequest(f"limit must be between 1 and {MAX_HISTORY}", param="limit")
    return value


async def list_runs(request: web.Request) -> web.StreamResponse:
    node_id = addressed_node(request)
    model_id = request.query.get("model_id") or request.query.get("model")
    if not model_id:
        raise BadRequest(
            "model_id is required: GET /router/v1/benchmarks?model_id=<id>", param="model_id"
        )
    limit = _history_limit(request)
    config = request.app[CATALOG].resolve(model_id)
    stored_id = config.id if config is not None else model_id
    rows = await request.app[STORE].benchmarks.runs(stored_id, limit)
    if config is None and not rows:
        raise ModelNotFound(model_id)
    return web.json_response(listing(node_id, stored_id, rows))


async def run(request: web.Request) -> web.StreamResponse:
    body = await read_json(request, required=True)
    # Every field is checked before anything starts or is stored.
    addressed_node(request)
    wanted = parse_run_request(body)
    config = request.app[CATALOG].resolve(wanted.model_id)
    if config is None:
        raise ModelNotFound(wanted.model_id)
    task = request.app[BENCHMARKS].start(wanted, config)
    # Shielded: the handler is cancelled when its client disconnects; the run is not.
    record = await asyncio.shield(task)
    return web.json_response(record)


async def benchmarks_context(app: web.Application) -> AsyncIterator[None]:
    """After the runtimes (a run leases them) and closed before them."""
    service = benchmarks_service(
        app[SETTINGS].cluster.node_id, app[RUNTIMES], app[EVENTS], app[STORE]
    )
    async with service as benchmarks:
        app[BENCHMARKS] = benchmarks
        yield


HANDLERS: dict[str, Handler] = {"bench.list": list_runs, "bench.run": run}
