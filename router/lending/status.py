"""This node's own load and models as a peer sees them: `GET /router/v1/node/runtime-status`
answers `status_body`, and the master's lending planner reads the same numbers through
`own_status` when the helper of a link is the master's own model (docs/lending.md, "The
master as a helper"), so both can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from router.appkeys import CLUSTER, RUNTIMES, SETTINGS
from router.cluster import NodeModel, RuntimeStatus
from router.config.schema import split_bind
from router.domain import Lane
from router.lending.helper import held, restore_pending
from router.lending.keys import LEND, LINKS
from router.runtime import RuntimeView


def status_body(app: web.Application) -> dict[str, Any]:
    """The runtime-status answer: per lane and per model, what is in the backends, queued,
    borrowed and held in gates, the loaded models and this node's cost fits."""
    runtimes = app[RUNTIMES]
    views = runtimes.views()
    stt = next((v.config.id for v in views if v.lane is Lane.VOICE and v.ready), None)
    borrowed = app[LINKS].borrowed
    lanes = {
        lane.value: {
            "active": sum(v.leases for v in views if v.lane is lane),
            # Own requests held in an enrolled model's gate are queued work too.
            "queued": runtimes.queue_length(lane) + held(app, lane)[0],
            "borrowed": borrowed.get(lane.value, 0),
            "held_borrowed": held(app, lane)[1],
            "restore_model": restore_pending(app, lane),
        }
        for lane in Lane
    }
    return {
        "node_id": app[SETTINGS].cluster.node_id,
        "active_requests": sum(v.leases for v in views),
        "queued_requests": sum(runtimes.queue_length(lane) for lane in Lane),
        "loaded_stt_model": stt,
        "lanes": lanes,
        "loaded_models": sorted({v.config.id for v in views if v.ready}),
        "models": _model_loads(views),
        "costs": [fit.to_dict() for fit in app[LEND].costs],
    }


def own_status(app: web.Application) -> RuntimeStatus:
    """`status_body` as the planner reads a peer's (no HTTP: the numbers are here)."""
    return RuntimeStatus.model_validate(status_body(app))


def own_models(app: web.Application) -> dict[str, NodeModel]:
    """This node's catalog by local ID, as its snapshot states it to the master."""
    return {m.local_id: m for m in app[CLUSTER].local_models()}


def loopback_url(app: web.Application) -> str:
    """This router's own listener over loopback (a lent request to the master's own model
    goes there: the node inference route, like any helper's)."""
    host, port = split_bind(app[SETTINGS].server.bind)
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _model_loads(views: Sequence[RuntimeView]) -> dict[str, dict[str, int]]:
    """Per configuration: requests in its backend and queued for it (the lending planner
    judges a slave-owned model busy from these)."""
    out: dict[str, dict[str, int]] = {}
    for view in views:
        load = out.setdefault(view.config.id, {"active": 0, "queued": 0})
        load["active"] += view.leases
        load["queued"] += view.queued
    return out
