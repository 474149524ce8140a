"""`create_app(settings)`: the one place that wires everything.

Middleware order (outermost first), as DESIGN.md section 5 lays it down:

  0. connection level (router/edge/listener.py `GuardedRequestHandler`, installed by
     `capped_site` in `serve()`): connection caps, header and body deadlines, request-line/header
     limits
  1. `edge_errors`     (router/edge/errors.py) stamps the arrival time; the one place a
                       RouterError raised below becomes a response, in the surface's own
                       shape, keys blanked out; unexpected exceptions become a clean 500;
                       after a response was prepared nothing more is written: the
                       connection is closed
  1b. `inflight`       every request counts in the graceful stop's drain (R27); during the
                       stop a new one gets 503
  2. `peer_cidr`       3. `host_allowlist`   (classification happens lazily in `route_of`,
  3b. `cors_preflight` (router/edge/cors.py) answers a listed origin's preflight on a model API
  4. `size_caps`       5. `origin_rule`       so a refused peer never learns which paths exist)
  6. `authenticate`    credential (key header, else WebUI session cookie + CSRF token for
                       unsafe methods) -> role; the route's declared role is checked
  then the dispatcher: the route table's `handler` name -> the handler.

Resources live in `cleanup_ctx`, started in dependency order and closed in reverse:
client session -> store -> catalog -> backend setup -> memory figures -> runtimes (-> startup
model) -> image lane -> ComfyUI jobs -> site files -> benchmarks -> guardians -> cluster service
(built, not yet run) -> lending (one service: links, settings, planner, gates, push) ->
downloads -> cluster (run) -> backend WebUIs. Each lifetime but the core ones here lives in the
package whose resource it starts (the API faces, router.lending).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from backends.base import built_backends_dir
from backends.process import hold_watchdog, reap_stale, release_watchdog
from backends.recipes import default_recipes, load_recipes
from router import lending
from router.api import HANDLERS, admin, inference, node, site
from router.appkeys import (
    AUTH,
    BACKEND_SETUP,
    BACKENDS,
    BORROWER,
    CATALOG,
    CLUSTER,
    DISPATCH,
    EVENTS,
    FIGURES,
    INFLIGHT,
    KV_CACHES,
    LAUNCH_OPTIONS,
    LOAD_TIMES,
    MAIN_APP,
    MATCH,
    METRICS,
    NODE_DISPATCH,
    POOLED,
    PROXY,
    RECORDER,
    ROUTE,
    RUNTIMES,
    SESSIONS,
    SETTINGS,
    SHUTDOWN,
    STORE,
    UI_LOGINS,
)
from router.backend_client import BackendClient
from router.backend_client.session import SESSION
from router.classify import ROUTES, Route, match
from router.cluster import (
    AllowList,
    ClusterService,
    NodeClient,
    NodeMemory,
    NodeModel,
    listener_url,
    node_models,
    read_node_memory,
)
from router.cluster.pooled.borrower import Borrower
from router.cluster.pooled.lender import Lender
from router.config import Catalog, CatalogChange, Settings
from router.edge import Handler, Sessions, auth, edge_errors, guards, queue_wait, secrets_of
from router.edge.cors import CorsPolicy, add_allow_origin, cors_preflight
from router.edge.inflight import InFlight, inflight_middleware
from router.edge.ui_sessions import LoginLimiter, UiSessions
from router.errors import NotImplementedRoute, RouteNotFound, RouterError
from router.forwarding import Proxy
from router.memory.book import FigureBook
from router.memory.host import HostRoom
from router.records import EventBus, Metrics, Recorder
from router.records.load_times import LoadTimes
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

# Every path reaches the dispatcher, which classifies it (router/classify/table.py). `[\s\S]`, not
# `.`: a decoded path may hold a line feed, and aiohttp's own plain-text 404 would answer it.
CATCH_ALL = r"/{tail:[\s\S]*}"

# What a slave does not serve: it is no management surface (docs/cluster.md).
MANAGEMENT_PREFIXES = ("/router/v1/site/", "/router/v1/benchmarks", "/router/ui", "/router/webuis")


def route_of(request: web.Request) -> Route:
    """Classify once per request; raises RouteNotFound / MethodNotAllowed."""
    route = request.get(ROUTE)
    if route is None:
        found = match(request.method, request.path)
        request[MATCH] = found
        request[ROUTE] = route = found.route
    return route


def _route_for(method: str, path: str) -> Route:
    """The route a request with `method` would reach (a CORS preflight asks for another)."""
    return match(method, path).route


def handler_table(settings: Settings) -> dict[str, Handler]:
    """The route table's handler names -> handlers for this node's role: a master merges the
    site reads that cover every node (FANOUT; the dispatcher relays a call naming another
    node); a slave serves no management route (404) to clients."""
    role = settings.cluster.role
    if role == "standalone":
        return HANDLERS
    if role == "master":
        return HANDLERS | {n: fan(HANDLERS[n]) for n, fan in node.FANOUT.items()}
    management = {r.handler for r in ROUTES if r.template.startswith(MANAGEMENT_PREFIXES)}
    return HANDLERS | dict.fromkeys(management, _not_on_a_slave)


async def _not_on_a_slave(request: web.Request) -> web.StreamResponse:
    raise RouteNotFound(request.path)


def dispatcher(table: dict[str, Handler], *, names: str = "local") -> Handler:
    """`names`: what the node a `names_node` route's call names does before its handler runs
    (issue 22): "relay" (a master's clients: another registered node's id is relayed there),
    "local" (only this node's id or none; another is a 404), "skip" (a slave's clients: no
    site routes, so no body is read for them)."""

    async def dispatch(request: web.Request) -> web.StreamResponse:
        route = route_of(request)
        handler = table.get(route.handler)
        if handler is None:
            raise NotImplementedRoute(
                f"{route.template} is recognised but not available in this version of tensor-router"
            )
        if route.names_node and names != "skip":
            relayed = await node.relay_named(request, route.names_node, relay=names == "relay")
            if relayed is not None:
                return relayed
        return await handler(request)

    return dispatch


def _names(settings: Settings) -> str:
    return {"master": "relay", "slave": "skip"}.get(settings.cluster.role, "local")


def create_app(settings: Settings, *, metrics: Metrics | None = None) -> web.Application:
    policy = auth.Policy(
        auth.KeyRing.from_settings(settings),
        settings,
        UiSessions(settings.ui.session_ttl, settings.ui.max_sessions),
    )
    inflight = InFlight()
    cors = CorsPolicy(settings.server.cors_origins)
    app = web.Application(
        middlewares=_middlewares(settings, policy, inflight, cors),
        client_max_size=int(settings.limits.max_control_body_mb * 1024 * 1024),
    )
    app[SETTINGS] = settings
    if cors.enabled:
        app.on_response_prepare.append(add_allow_origin(cors, route_of))
    app[AUTH] = policy
    app[UI_LOGINS] = LoginLimiter(settings.ui.login_failures_per_minute)
    _records(app, settings, metrics or Metrics())
    app[SHUTDOWN] = _signal_self
    app[SESSIONS] = Sessions()
    app[INFLIGHT] = inflight
    app.cleanup_ctx.extend(_CONTEXTS)
    app.on_shutdown.append(_begin_drain)
    app.on_response_prepare.append(queue_wait.on_prepare)
    app[DISPATCH] = dispatcher(handler_table(settings), names=_names(settings))
    app[NODE_DISPATCH] = dispatcher(HANDLERS)
    app.router.add_route("*", CATCH_ALL, app[DISPATCH])
    return app


def _middlewares(
    settings: Settings, policy: auth.Policy, inflight: InFlight, cors: CorsPolicy
) -> list[Any]:
    return [  # the order of the module docstring
        edge_errors(settings, route_of),
        inflight_middleware(inflight),
        *guards.edge_middlewares(
            settings, route_of, cors_preflight(cors, _route_for), cors.trusted
        ),
        auth.policy_middleware(policy, route_of),
    ]


def _records(app: web.Application, settings: Settings, metrics: Metrics) -> None:
    """The event bus and what listens to every event: the metrics and the load times; the
    recorder of each request."""
    app[EVENTS] = EventBus(settings.ui.events_queue)
    app[METRICS] = metrics
    app[EVENTS].subscribe_callback(app[METRICS].on_event)
    app[LOAD_TIMES] = LoadTimes()
    app[EVENTS].subscribe_callback(app[LOAD_TIMES].on_event)
    app[EVENTS].add_enricher(app[LOAD_TIMES].enrich)
    app[RECORDER] = Recorder(app[METRICS], settings.cluster.node_id, secrets_of(settings))


def create_backend_ui_app(main: web.Application) -> web.Application:
    """The backend-UI listener's app (docs/webuis.md): another origin than `main`'s, with the
    same edge guards (its own Host names) and error renderer, serving only
    `/router/webuis/<kind>/...` with `main`'s resources (start it after `main`)."""
    settings = main[SETTINGS]
    route_of = admin.listener_route_of
    guarded = guards.edge_middlewares(admin.listener_settings(settings), route_of)
    middlewares: list[Any] = [
        edge_errors(settings, route_of),
        inflight_middleware(main[INFLIGHT]),
        *guarded,
    ]
    app = web.Application(middlewares=middlewares)
    app[MAIN_APP] = main
    app.on_startup.append(admin.share_resources)
    app.on_response_prepare.append(admin.on_prepare)
    app.router.add_route("*", CATCH_ALL, admin.serve)
    return app


def _signal_self() -> None:
    """Default stop request when no server loop owns the app: the process's own SIGTERM path."""
    os.kill(os.getpid(), signal.SIGTERM)


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, enable_cleanup_closed=True)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        app[SESSION] = session
        app[BACKENDS] = BackendClient(session, app[EVENTS])
        runtime = app[SETTINGS].runtime
        app[PROXY] = Proxy(
            session,
            idle_timeout=runtime.stream_idle_timeout,
            response_timeout=runtime.response_timeout,
            connect_window=runtime.load_timeout,
            inflight=app[INFLIGHT],
        )
        yield
        await app[PROXY].close()


async def _store(app: web.Application) -> AsyncIterator[None]:
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


async def _catalog(app: web.Application) -> AsyncIterator[None]:
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


async def _backend_setup(app: web.Application) -> AsyncIterator[None]:
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


async def _figures(app: web.Application) -> AsyncIterator[None]:
    """Measured memory (docs/residency.md): the store's figures cached, before the runtimes
    that measure into it; pending measurements finish (bounded) after the runtimes stop."""
    book = FigureBook(app[STORE].memory)
    await book.load()
    app[FIGURES] = measuring = Measuring(book, app[SETTINGS])
    yield
    await measuring.close()


async def _runtimes(app: web.Application) -> AsyncIterator[None]:
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
        observer=observer_factory(store, readahead.at_load),
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


async def _pooled(app: web.Application) -> AsyncIterator[None]:
    """The memory this node lends over RPC (docs/cluster.md, "Pooled memory"): its leases'
    servers stop before the runtimes do, and a lease's bytes sit in the runtimes' ledger."""
    settings = app[SETTINGS]
    folder = state_dir(settings)
    app[POOLED] = lender = Lender(
        settings.pooled,
        settings.cluster.node_id,
        app[RUNTIMES].ledger,
        folder,
        folder / "pids",
    )
    yield
    await lender.close()


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


async def _begin_drain(app: web.Application) -> None:
    """Listener already closed: queued requests get 503; running work may finish (R27)."""
    app[RUNTIMES].refuse_new_work()


async def _cluster_service(app: web.Application) -> AsyncIterator[None]:
    """The registry and its client, built before lending (which is handed the service) and
    run by `_cluster` once the rest is ready to be announced (docs/cluster.md)."""
    settings = app[SETTINGS]
    catalog, runtimes = app[CATALOG], app[RUNTIMES]

    def local_models() -> tuple[NodeModel, ...]:
        configs = catalog.all_configs()
        missing = {c.id: catalog.missing_files(c) for c in configs}
        disabled = set(catalog.disabled_ids())
        memory = service.memory  # the last reading (refreshed before each snapshot is sent)
        return node_models(
            configs, runtimes.views(), disabled=disabled, missing=missing, memory=memory
        )

    async def read_memory() -> NodeMemory:
        return await read_node_memory(runtimes, catalog.configs())

    def fatal(reason: str) -> None:
        log.error("stopping: %s", reason)
        app[SHUTDOWN]()

    # Its own listener allowed from the start: the master lending to its own model calls its
    # own node route (docs/lending.md); no request can name another address.
    own = AllowList([listener_url(settings.server.host, settings.server.port)])
    client = NodeClient(
        app[SESSION], settings.cluster.token or "", own, settings.cluster.control_timeout
    )
    app[CLUSTER] = service = ClusterService(
        settings.cluster, client, local_models, fatal, read_memory
    )
    yield


async def _borrower(app: web.Application) -> AsyncIterator[None]:
    """A master's models that span nodes (docs/cluster.md, "Pooled memory"): a swap hook
    that leases before llama-server starts and releases when its process is gone."""
    settings = app[SETTINGS]
    if settings.cluster.role != "master":
        yield
        return
    runtimes = app[RUNTIMES]
    borrower = Borrower(app[CLUSTER], runtimes.ledger.room_for, settings.pooled.lease_ttl)
    runtimes.hooks.add(borrower)
    app[BORROWER] = borrower
    yield
    await borrower.close()


async def _cluster(app: web.Application) -> AsyncIterator[None]:
    """The master's polling or the slave's registration (docs/cluster.md)."""
    service = app[CLUSTER]
    task = (
        asyncio.create_task(service.run(), name="cluster") if service.role != "standalone" else None
    )
    yield
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# create_app's contexts: started in this order and cleaned up in the reverse one.
_CONTEXTS = (
    _client_session,
    _store,
    _catalog,
    _backend_setup,
    _figures,
    _runtimes,
    _pooled,
    inference.ollama_context,
    inference.responses_context,  # after the runtimes its table points at
    inference.images_context,
    inference.comfy_context,
    site.site_context,
    site.benchmarks_context,
    site.guardians_context,
    _cluster_service,  # built here, run by `_cluster` (lending reads it)
    _borrower,
    lending.lending_context,
    site.downloads_context,  # before the cluster announces this node
    _cluster,
    site.webuis_context,
)
