"""The one lending service of a node (docs/lending.md).

`Lending` is the shared state (router/lending/state.py: the links, the settings in force, the
decision log, the lease book, the gates and the restorer, with the runtime manager, the cluster
service and the store handed in) with what acts on it: the planner, the
owner's side, the helper's side and, on a master, the push of its settings and links to the
slaves. `open_lending` builds and starts it; the app keeps it under `LENDING` (router/appkeys.py)
and router/lifetimes.py opens it after the store, the runtimes and the cluster service exist
and before the cluster announces this node (a master's push and a slave's status may come at
once).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import asdict
from typing import Any

from router import __version__
from router.cluster import ClusterService
from router.config import LendingSettings, Settings
from router.errors import InternalError
from router.lending.decisions import Decision, DecisionLog, decision_row
from router.lending.helper import Helper
from router.lending.links import Link, LinkTable, replace_links
from router.lending.owner import Owner
from router.lending.planner import Planner
from router.lending.push import LINKS_PATH, SETTINGS_PATH, Pusher
from router.lending.settings import LendingLayers, apply_batch, resolve, usable_saved
from router.lending.state import LendingState
from router.runtime import RuntimeManager
from router.store import Store

log = logging.getLogger(__name__)


class Lending(LendingState):
    """Lending on this node: one instance under `app[LENDING]`; handlers call it. The three
    parts that act on the state are built on first use, each once."""

    pusher: Pusher | None = None  # a master's, from `start`

    @functools.cached_property
    def planner(self) -> Planner:
        return Planner(self)

    @functools.cached_property
    def owner(self) -> Owner:
        return Owner(self, self.planner)

    @functools.cached_property
    def helper(self) -> Helper:
        return Helper(self)

    # -- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        with contextlib.suppress(Exception):  # a store that cannot be read: no fits yet
            await self.planner.refit()
        self.planner.start()
        self.runtimes.released.append(self.owner.job_ended)
        self.cluster.on_registered.append(self.registered)
        if self.master:
            self.pusher = Pusher(self.payloads, lambda: self.cluster)
            self.pusher.start()

    async def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.runtimes.released.remove(self.owner.job_ended)
        with contextlib.suppress(ValueError):
            self.cluster.on_registered.remove(self.registered)
        await self.restorer.close()
        await self.planner.close()
        self.decisions.sink = None  # the store closes after this service
        if self.pusher is not None:
            await self.pusher.close()

    # -- the master's push ------------------------------------------------------------------

    def payloads(self) -> list[tuple[str, dict[str, Any]]]:
        """What a push sends, built now (the values and links in force at send time)."""
        values = self.values.model_dump(mode="json")
        links = [asdict(link) for link in self.links.links]
        return [(SETTINGS_PATH, {"settings": values}), (LINKS_PATH, {"links": links})]

    def registered(self, node_id: str) -> None:
        """A slave (re)registered (`ClusterService.on_registered`): push the lending state to it."""
        if self.pusher is not None:
            self.pusher.node(node_id)

    def links_changed(self) -> None:
        if self.pusher is not None:
            self.pusher.everyone()

    def settings_changed(self, values: LendingSettings) -> None:
        """What follows a change of the values, in the same step as the change: the decision
        log's retention, and the push to the slaves (which sends what is in force when it runs)."""
        self.store.lending.decision_retention = values.offload_decisions_retention
        self.links_changed()

    # -- writes: the handlers pass values, this service changes its state -------------------

    async def replace_links(
        self, lane: str, anchor: tuple[str, str], links: tuple[Link, ...]
    ) -> int:
        """Every link of `anchor` on `lane` replaced by `links`: in the store (one transaction),
        then in force, then pushed. Returns how many stored links were removed."""
        rows = [
            (link.lane, *link.owner, *link.helper, link.load_if_unloaded, link.restore_after_borrow)
            for link in links
        ]
        removed = await self.store.links.replace(lane, anchor, rows)
        self.links.links = replace_links(self.links.links, lane, anchor, links)
        self.links_changed()
        return removed

    def take_links(self, links: tuple[Link, ...]) -> None:
        """A slave takes its master's links: only the tuple is replaced, so the borrowed
        counts and the helpers' statuses stay (the master's store is the one that persists)."""
        self.links.links = links

    async def save_settings(self, batch: Any | None) -> LendingLayers:
        """A master's save from the site: `batch` over the saved layer (None: back to the config
        file), validated whole, stored, in force and pushed as one step under the layers' lock
        (no other save slips between the check and the write). Returns the layers after it."""
        layers = self.saved_layers()
        async with layers.lock:
            saved: dict[str, Any] = {}
            if batch is None:
                values = resolve(layers.config, {})
            else:
                retention = self.settings.analytics.raw_retention
                saved, values = apply_batch(batch, layers.saved, layers.config, retention)
            await self.store.lending.replace_saved(saved)
            layers.saved, layers.values = saved, values
            self.settings_changed(values)
        # A shorter retention takes effect now rather than at the next hourly pass.
        await self.store.lending.prune_decisions(values.offload_decisions_retention)
        return layers

    def take_settings(self, values: LendingSettings) -> None:
        """A slave takes its master's resolved values: they win over its own file until it
        restarts (it is pushed them again each time it registers)."""
        self.layers.values = values
        self.store.lending.decision_retention = values.offload_decisions_retention
        if isinstance(self.layers, LendingLayers):
            self.layers.pushed = True

    def saved_layers(self) -> LendingLayers:
        """The settings with their layers (config file, saved, lock), as `lending_context`
        loads them; InternalError for a service built with bare values."""
        if not isinstance(self.layers, LendingLayers):
            raise InternalError("the lending settings were not loaded with their layers")
        return self.layers


async def load_layers(settings: Settings, store: Store) -> LendingLayers:
    """At start: the config file's values under the saved ones that still apply."""
    config = settings.cluster.lending()
    saved = await store.lending.saved()
    kept, dropped = usable_saved(config, saved, settings.analytics.raw_retention)
    for problem in dropped:
        log.warning("saved lending setting not applied (the config file's value is): %s", problem)
    return LendingLayers(config, kept)


def sink_for(store: Store, router_version: str) -> DecisionLog:
    """The log whose every row goes to the store's writer (an append, never an await)."""

    def to_store(decision: Decision) -> None:
        store.lending.add_decision(decision_row(decision, router_version))

    return DecisionLog(sink=to_store)


async def open_lending(
    settings: Settings, runtimes: RuntimeManager, cluster: ClusterService, store: Store
) -> Lending:
    """The service of this node, built and started: the links, the settings and the decision
    log loaded (decisions pruned now, then by the store's hourly pass). `close()` stops it."""
    links = LinkTable(Link(**row) for row in await store.links.rows())
    layers = await load_layers(settings, store)
    store.lending.decision_retention = layers.values.offload_decisions_retention
    await store.lending.prune_decisions(layers.values.offload_decisions_retention)
    service = Lending(
        settings,
        runtimes,
        cluster,
        store,
        links=links,
        layers=layers,
        decisions=sink_for(store, __version__),
    )
    await service.start()
    return service
