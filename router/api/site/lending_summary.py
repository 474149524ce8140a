"""`GET /router/v1/site/offload/summary`: leases in force, each node's held / lent / borrowed
counts, and every node's cost fits (docs/lending.md). The planner is router/lending/planner.py.
"""

from __future__ import annotations

import time

from aiohttp import web

from router.appkeys import CLUSTER, LENDING, SETTINGS
from router.edge import Handler


async def summary(request: web.Request) -> web.StreamResponse:
    """Leases in force, each node's held / lent / borrowed counts, and every node's fits."""
    app = request.app
    lending, service = app[LENDING], app[CLUSTER]
    book = lending.book
    own = app[SETTINGS].cluster.node_id
    others = sorted({e.node_id for e in service.registry.nodes() if e.node_id and e.node_id != own})
    seen = await lending.planner.statuses(others)
    nodes = book.holding.by_node([own, *others])
    for row in nodes:
        node = row["node_id"]
        if node == own:
            row["borrowed"] = sum(lending.links.borrowed.values())
        else:
            status = seen.get(node)
            row["borrowed"] = sum(x.borrowed for x in status.lanes.values()) if status else None
    costs = [{"node_id": own, **fit.to_dict()} for fit in book.costs]
    for node in others:
        if node in seen:
            costs.extend({"node_id": node, **c.model_dump(mode="json")} for c in seen[node].costs)
    return web.json_response(
        {"leases": book.table.rows(time.monotonic()), "nodes": nodes, "costs": costs}
    )


HANDLERS: dict[str, Handler] = {"site.offload_summary": summary}
