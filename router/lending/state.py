"""What lending shares on a node: its dependencies and its state, and this node's status.

`LendingState` is handed the settings, the runtime manager (its views and queues), the cluster
service and the store (its calls to peers go through the cluster service's `NodeClient`), and owns the links in force, the settings in force,
the decision log, the lease book, the helper side's gates and restorer. The planner, the
owner's side and the helper's side act on it; `Lending` (router/lending/service.py) is this
state with those three and its lifetime. The runtime-status body a node reports is built here
(`status_body`), and the master's planner reads the same numbers through `own_status` when the
helper of a link is the master's own model (docs/lending.md, "The master as a helper").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from router.cluster import ClusterService, NodeModel, RuntimeStatus, listener_url
from router.config import LendingSettings, ModelConfig, Settings
from router.domain import Lane
from router.lending.decisions import DecisionLog
from router.lending.gate import Gates
from router.lending.leases import LendBook
from router.lending.links import LendingValues, LinkTable
from router.lending.restore import Restorer
from router.runtime import RuntimeManager, RuntimeView
from router.store import Store

log = logging.getLogger(__name__)


class LendingState:
    """Lending's dependencies and state on one node (no I/O of its own but the restore load)."""

    def __init__(
        self,
        settings: Settings,
        runtimes: RuntimeManager,
        cluster: ClusterService,
        store: Store,
        *,
        links: LinkTable | None = None,
        layers: LendingValues | None = None,
        decisions: DecisionLog | None = None,
    ) -> None:
        self.settings = settings
        self.node_id = settings.cluster.node_id
        self.runtimes, self.cluster, self.store = runtimes, cluster, store
        self.links = links or LinkTable()
        self.layers = layers or LendingValues(settings.cluster.lending())
        self.decisions = decisions or DecisionLog()
        self.book = LendBook()
        self.gates = Gates(self.node_id, lambda: self.values.scheduling_backend_depth)
        self.restorer: Restorer[ModelConfig] = Restorer(
            lambda: self.values.offload_restore_delay, self._quiet, self._restore_load
        )

    @property
    def values(self) -> LendingSettings:
        """The lending settings in force (read once per decision; a save replaces them whole)."""
        return self.layers.values

    @property
    def master(self) -> bool:
        return self.settings.cluster.role == "master"

    # -- this node as a peer sees it --------------------------------------------------------

    def status_body(self) -> dict[str, Any]:
        """The runtime-status answer: per lane and per model, what is in the backends, queued,
        borrowed and held in gates, the loaded models and this node's cost fits. The planner
        reads the same numbers (`own_status`) when the master's own model is a helper."""
        runtimes = self.runtimes
        views = runtimes.views()
        stt = next((v.config.id for v in views if v.lane is Lane.VOICE and v.ready), None)
        borrowed = self.links.borrowed
        lanes = {
            lane.value: {
                "active": sum(v.leases for v in views if v.lane is lane),
                # Own requests held in an enrolled model's gate are queued work too.
                "queued": runtimes.queue_length(lane) + self.gates.held(lane.value)[0],
                "borrowed": borrowed.get(lane.value, 0),
                "held_borrowed": self.gates.held(lane.value)[1],
                "restore_model": self.restore_pending(lane),
            }
            for lane in Lane
        }
        return {
            "node_id": self.node_id,
            "active_requests": sum(v.leases for v in views),
            "queued_requests": sum(runtimes.queue_length(lane) for lane in Lane),
            "loaded_stt_model": stt,
            "lanes": lanes,
            "loaded_models": sorted({v.config.id for v in views if v.ready}),
            "ready_lanes": ready_lanes(views),
            "models": model_loads(views),
            "costs": [fit.to_dict() for fit in self.book.costs],
        }

    def own_status(self) -> RuntimeStatus:
        """`status_body` as the planner reads a peer's (no HTTP: the numbers are here)."""
        return RuntimeStatus.model_validate(self.status_body())

    def own_models(self) -> dict[str, NodeModel]:
        """This node's catalog by local ID, as its snapshot states it to the master."""
        return {m.local_id: m for m in self.cluster.local_models()}

    def loopback_url(self) -> str:
        """This router's own listener over loopback (a lent request to the master's own model
        goes there: the node inference route, like any helper's)."""
        return listener_url(self.settings.server.host, self.settings.server.port)

    def restore_pending(self, lane: Lane) -> str | None:
        """The model `lane` goes back to after borrowed work, if a restore is pending."""
        config = self.restorer.pending(lane.value)
        return config.id if config else None

    # -- restore after borrow (router/lending/restore.py calls these) -----------------------

    def _quiet(self, lane_name: str) -> bool:
        lane = Lane(lane_name)
        lane_gates = self.gates.lanes.get(lane_name)
        busy = any(v.leases for v in self.runtimes.views() if lane in v.occupies)
        idle_gates = lane_gates is None or lane_gates.idle
        return idle_gates and not busy and self.runtimes.queue_length(lane) == 0

    async def _restore_load(self, config: ModelConfig, lane_name: str) -> None:
        lane = Lane(lane_name)
        now = lane_model(self.runtimes.views(), lane)
        if now is not None and now.id == config.id:
            return
        log.info("restore after borrow: loading %s on the %s lane", config.id, lane_name)
        await self.runtimes.load(config, lane)


def lane_model(views: Sequence[RuntimeView], lane: Lane) -> ModelConfig | None:
    """The model the lane serves now (loading or ready, not on its way out)."""
    return next((v.config for v in views if lane in v.occupies and v.active), None)


def model_loads(views: Sequence[RuntimeView]) -> dict[str, dict[str, int]]:
    """Per configuration: requests in its backend and queued for it (the lending planner
    judges a slave-owned model busy from these)."""
    out: dict[str, dict[str, int]] = {}
    for view in views:
        load = out.setdefault(view.config.id, {"active": 0, "queued": 0})
        load["active"] += view.leases
        load["queued"] += view.queued
    return out


def ready_lanes(views: Sequence[RuntimeView]) -> dict[str, list[str]]:
    """Per configuration with a ready runtime taking new work: the lanes those runtimes hold
    (a master places selectorless embeddings by them, docs/cluster.md)."""
    out: dict[str, set[str]] = {}
    for view in views:
        if view.ready and view.active:
            out.setdefault(view.config.id, set()).update(lane.value for lane in view.occupies)
    return {config_id: sorted(lanes) for config_id, lanes in out.items()}
