"""The lifetimes of the resources below the API that `create_app` wires (router/app.py lists
them in order): the store, the catalog, the backend setup, the memory figures and the runtimes
(with the startup model and the drain), and lending. Each is a `cleanup_ctx` entry: it builds its resource,
puts it under its app key, and closes it when the app stops.

Apart from router/app.py because these are the parts of the node (what runs models), while
app.py composes the HTTP side (middlewares, dispatch, the client session, the cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from backends.base import built_backends_dir
from backends.process import hold_watchdog, reap_stale, release_watchdog
from backends.recipes import default_recipes, load_recipes
from router.appkeys import (
    BACKEND_SETUP,
    BACKENDS,
    BORROWER,
    CATALOG,
    CLUSTER,
    EVENTS,
    FIGURES,
    KV_CACHES,
    LAUNCH_OPTIONS,
    LENDING,
    LOAD_TIMES,
    METRICS,
    RECORDER,
    RUNTIMES,
    SETTINGS,
    STORE,
)
from router.config import Catalog, CatalogChange, Settings
from router.errors import RouterError
from router.lending import open_lending
from router.memory.book import FigureBook
from router.memory.host import HostRoom
from router.records import EventBus
from router.runtime import Loader, RuntimeManager, observer_factory
from router.runtime.hooks import SwapHooks
from router.runtime.kvcache import KvCaches
from router.runtime.measuring import Measuring
from router.runtime.readahead import ReadAhead
from router.runtime.sleep import VllmSleep
from router.setup import BackendSetup, LaunchOptions
from router.store import Store

log = logging.getLogger(__name__)

# How often `models.config_dir` is rescanned for files added, edited or removed on disk.
# A poll, not inotify: it also sees network mounts and editors that replace the file.
CATALOG_POLL_SECONDS = 2.0


async def store_context(app: web.Application) -> AsyncIterator[None]:
    """Analytics, load captures, load errors and model state; flushed when it closes (R29)."""
    settings = app[SETTINGS]
    store = await Store.open(
        settings.analytics.database_path or state_dir(settings) / "router.sqlite",
        node_id=settings.cluster.node_id,
        analytics=settings.analytics,
    )
    app[STORE] = store

    def incident(info: dict[str, Any]) -> None:  # router/store/file_watch.py
        app[METRICS].store_replaced.inc()
        app[EVENTS].publish("store_replaced", **info)  # the WebUI's banner

    store.on_incident = incident
    app[LOAD_TIMES].seed(await store.load_attempts.durations())
    # Off means off: no row is even built (bench/analytics compares the two).
    app[RECORDER].sink = store if settings.analytics.enabled else None
    yield
    app[RECORDER].sink = None
    await store.close()


async def catalog_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    store = app[STORE]
    catalog = Catalog(
        settings.models.config_dir,
        settings.backend.mode,
        settings.models.file_roots,
        on_state_change=store.model_states.set_disabled,
    )
    catalog.load_disabled(await store.model_states.disabled())
    await catalog.refresh()
    for name, problem in catalog.errors.items():
        log.warning("skipped %s: %s", name, problem)
    app[CATALOG] = catalog
    # Announced from here on (the first scan above is the startup state, not a change).
    catalog.on_change = functools.partial(_announce_catalog, app[EVENTS])
    watcher = asyncio.create_task(catalog.watch(CATALOG_POLL_SECONDS))
    yield
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    await catalog.close()


def _announce_catalog(bus: EventBus, change: CatalogChange) -> None:
    """The `catalog` event on /router/v1/events: what a refresh added, changed or removed."""
    bus.publish(
        "catalog",
        added=list(change.added),
        changed=list(change.changed),
        removed=list(change.removed),
        errors=dict(change.errors),
    )


def state_dir(settings: Settings) -> Path:
    base = settings.analytics.database_path
    folder = base.parent if base is not None else Path.cwd() / "data"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def backend_setup_context(app: web.Application) -> AsyncIterator[None]:
    """Init jobs and vLLM's launch options (docs/backends-setup.md); running jobs are
    cancelled when the router stops, after the runtimes (closed before this)."""
    settings = app[SETTINGS]
    folder = state_dir(settings)
    app[LAUNCH_OPTIONS] = LaunchOptions(folder / "launch-options.json", settings)
    recipe_file = settings.setup.recipes_file
    recipes = load_recipes(recipe_file) if recipe_file is not None else default_recipes()
    service = BackendSetup(
        recipes,
        root=built_backends_dir(),
        jobs_dir=folder / "backend-setup",
        section=settings.setup,
        node_id=settings.cluster.node_id,
        events=app[EVENTS],
    )
    app[BACKEND_SETUP] = service
    yield
    await service.close()


async def figures_context(app: web.Application) -> AsyncIterator[None]:
    """Measured memory (docs/residency.md): the store's figures cached, before the runtimes
    that measure into it; pending measurements finish (bounded) after the runtimes stop."""
    book = FigureBook(app[STORE].memory)
    await book.load()
    app[FIGURES] = measuring = Measuring(book, app[SETTINGS])
    yield
    await measuring.close()


async def _pooled_sent(app: web.Application, key: str) -> dict[str, Any] | None:
    """Bytes a load sent to its lending nodes (the borrower is built after the runtimes)."""
    borrower = app.get(BORROWER)
    return await borrower.sent(key) if borrower is not None else None


async def runtimes_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    pid_dir = state_dir(settings) / "pids"
    pid_dir.mkdir(parents=True, exist_ok=True)
    reaped = reap_stale(pid_dir)
    if reaped:
        log.warning("stopped %d backend process(es) left by a previous router", len(reaped))
    kv = KvCaches(settings, app[BACKENDS], state_dir(settings) / "kv-cache")
    app[KV_CACHES] = kv
    # Host memory for the read-ahead and the vLLM sleep is judged by the memory package over
    # the manager's live ledger (built below; asked only once the manager runs).
    host = HostRoom(lambda: manager.live_ledger(), settings.memory.reserve)
    readahead = ReadAhead(settings, app[EVENTS].publish, host)
    sleep = VllmSleep(settings, app[BACKENDS], host)
    # KV restore runs before the measurement, so the figure includes the restored cache.
    hooks = SwapHooks([kv, readahead, sleep, app[FIGURES]])
    loader = Loader(
        settings, app[BACKENDS], pid_dir, env_overlay=app[LAUNCH_OPTIONS].env_for, hooks=hooks
    )
    store = app[STORE]
    manager = RuntimeManager(
        settings,
        loader,
        app[EVENTS],
        hooks=hooks,
        figures=app[FIGURES],
        on_load_error=store.load_errors.record,
        observer=observer_factory(store, readahead.at_load, functools.partial(_pooled_sent, app)),
        usual_load=app[LOAD_TIMES].usual,
    )
    app[RUNTIMES] = manager
    app[METRICS].watch(manager)
    hold_watchdog()  # started now, off every cold-start path; stopped with the router
    startup = asyncio.create_task(_startup_model(app)) if settings.models.startup_model else None
    try:
        yield
    finally:
        if startup is not None:
            startup.cancel()  # a load still running is stopped by the shutdown below
            await asyncio.gather(startup, return_exceptions=True)
        await manager.shutdown(0)
        await readahead.close()
        app[METRICS].unwatch()
        release_watchdog()


async def _startup_model(app: web.Application) -> None:
    model_id = app[SETTINGS].models.startup_model
    assert model_id is not None
    config = app[CATALOG].resolve(model_id)
    if config is None:
        log.error("models.startup_model %r is not in the catalog", model_id)
        return
    try:
        await app[RUNTIMES].load(config)
    except RouterError as err:
        log.error("startup model %s failed to load: %s", model_id, err.message)


async def begin_drain(app: web.Application) -> None:
    """Listener already closed: queued requests get 503; running work may finish (R27)."""
    app[RUNTIMES].refuse_new_work()


async def lending_context(app: web.Application) -> AsyncIterator[None]:
    """Lending's service (docs/lending.md), once the store, the runtimes and the cluster service
    exist: its planner and push run until the app stops."""
    service = await open_lending(app[SETTINGS], app[RUNTIMES], app[CLUSTER], app[STORE])
    app[LENDING] = service
    try:
        yield
    finally:
        await service.close()
