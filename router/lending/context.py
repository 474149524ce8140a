"""Lending's lifetime on every node, and the master's push of its state to the slaves.

`links_context` (a `cleanup_ctx` entry, after the store) loads the links, the lending settings
(the config file's values under the saved ones that still apply) and the decision log writing
to the store (pruned now, then by the store's hourly pass), and on a master starts the push of
settings and links to the slaves (router/lending/push.py sends). The planner's lifetime is
`planner.planning_context`, the helper side's `helper.helper_context` (they read the values
loaded here, so they start after it).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from aiohttp import web

from router import __version__
from router.appkeys import CLUSTER, SETTINGS, STORE
from router.lending.decisions import Decision, DecisionLog, decision_row
from router.lending.keys import DECISIONS, LENDING, LENDING_PUSH, LINKS
from router.lending.links import Link, LinkTable
from router.lending.push import LINKS_PATH, SETTINGS_PATH, Pusher
from router.lending.settings import LendingLayers, usable_saved
from router.store import Store

log = logging.getLogger(__name__)


async def links_context(app: web.Application) -> AsyncIterator[None]:
    store = app[STORE]
    rows = await store.links.rows()
    app[LINKS] = LinkTable(Link(**row) for row in rows)
    app[LENDING] = layers = await load_layers(app)
    app[DECISIONS] = sink_for(store, __version__)
    retention = layers.values.offload_decisions_retention
    store.lending.decision_retention = retention
    await store.lending.prune_decisions(retention)
    pusher = start_pusher(app)
    try:
        yield
    finally:
        app[DECISIONS].sink = None  # the store closes after this context
        if pusher is not None:
            await pusher.close()


async def load_layers(app: web.Application) -> LendingLayers:
    """At start: the config file's values under the saved ones that still apply."""
    settings = app[SETTINGS]
    config = settings.cluster.lending()
    saved = await app[STORE].lending.saved()
    kept, dropped = usable_saved(config, saved, settings.analytics.raw_retention)
    for problem in dropped:
        log.warning("saved lending setting not applied (the config file's value is): %s", problem)
    return LendingLayers(config, kept)


def sink_for(store: Store, router_version: str) -> DecisionLog:
    """The log whose every row goes to the store's writer (an append, never an await)."""

    def to_store(decision: Decision) -> None:
        store.lending.add_decision(decision_row(decision, router_version))

    return DecisionLog(sink=to_store)


def payloads(app: web.Application) -> list[tuple[str, dict[str, Any]]]:
    """What a push sends, built now (the values and links in force at send time)."""
    values = app[LENDING].values.model_dump(mode="json")
    links = [asdict(link) for link in app[LINKS].links]
    return [(SETTINGS_PATH, {"settings": values}), (LINKS_PATH, {"links": links})]


def start_pusher(app: web.Application) -> Pusher | None:
    if app[SETTINGS].cluster.role != "master":
        return None
    pusher = Pusher(lambda: payloads(app), lambda: app.get(CLUSTER))
    app[LENDING_PUSH] = pusher
    pusher.start()
    return pusher


def registered(app: web.Application, node_id: str) -> None:
    """A slave (re)registered: push the lending state to it."""
    push = app.get(LENDING_PUSH)
    if push is not None:
        push.node(node_id)


def links_changed(app: web.Application) -> None:
    push = app.get(LENDING_PUSH)
    if push is not None:
        push.everyone()
