"""`GET /router/v1/site/offload/decisions`: the lending decision log, newest first, in pages
(docs/lending.md). A master answers with its own rows; `node_id=<slave>` relays the call to
that slave, whose rows are the helper side of the work it returned (router/api/node/site_relay.py).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from router.appkeys import STORE
from router.edge import Handler, addressed_node, query_int
from router.errors import BadRequest
from router.store.lending import DecisionFilter

MAX_LIMIT = 500
KINDS = ("plan", "dispatch", "helper")
LANES = ("text", "image")


def _choice(query: Any, name: str, allowed: tuple[str, ...]) -> str | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if raw not in allowed:
        raise BadRequest(f"{name} must be one of {', '.join(allowed)}", param=name)
    return str(raw)


def parse_filter(query: Any) -> DecisionFilter:
    """The query's filters, or a 400 naming the bad one."""
    model_id = query.get("model_id") or None
    if model_id is not None and len(model_id) > 256:
        raise BadRequest("model_id is at most 256 characters", param="model_id")
    limit = query_int(query, "limit", 100, 1, MAX_LIMIT)
    assert limit is not None
    return DecisionFilter(
        limit=limit,
        before=query_int(query, "before", None, 1, 2**63 - 1),
        kind=_choice(query, "kind", KINDS),
        lane=_choice(query, "lane", LANES),
        model_id=model_id,
    )


async def offload_decisions(request: web.Request) -> web.StreamResponse:
    addressed_node(request)  # names_node: the dispatcher relayed another node's id (or 404)
    filters = parse_filter(request.query)
    page = await request.app[STORE].lending.decision_page(filters)
    return web.Response(text=json.dumps(page), content_type="application/json")


HANDLERS: dict[str, Handler] = {"site.offload_decisions": offload_decisions}
