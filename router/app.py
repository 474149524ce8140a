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
client session -> store -> scoped keys -> catalog -> backend setup -> memory figures ->
runtimes (-> startup model) -> image lane -> ComfyUI jobs -> site files -> benchmarks ->
guardians -> cluster service (built, not yet run) -> lending (one service: links, settings,
planner, gates, push) -> downloads -> cluster (run) -> backend WebUIs. The node's own resources
(store, catalog to runtimes, lending) live in router/lifetimes.py; the client session and the
cluster's here (they hold the raw session); the rest in the package whose resource it starts
(the API faces).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from router import lifetimes
from router.api import HANDLERS, admin, inference, node, site
from router.appkeys import (
    AUTH,
    BACKENDS,
    BORROWER,
    CATALOG,
    CLUSTER,
    DISPATCH,
    EVENTS,
    INFLIGHT,
    KEYS,
    KV_CACHES,
    KV_HISTORY,
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
from router.cluster.pooled.borrower import Borrower, GangHome, spans
from router.cluster.pooled.follower import VllmFollowers
from router.cluster.pooled.lender import Lender
from router.cluster.pooled.plans import gang_size
from router.cluster.pooled.reclaim import ask_master
from router.config import Settings
from router.edge import (
    Handler,
    Sessions,
    auth,
    edge_errors,
    guards,
    queue_wait,
    secrets_of,
    trace_header,
)
from router.edge.cors import CorsPolicy, add_allow_origin, cors_preflight
from router.edge.inflight import InFlight, inflight_middleware
from router.edge.ui_sessions import LoginLimiter, UiSessions
from router.errors import NotImplementedRoute, RouteNotFound
from router.forwarding import Proxy
from router.keys import KeyBook
from router.memory.estimate import gang_share
from router.records import EventBus, Metrics, Recorder
from router.records.kv_history import KvHistory
from router.records.load_times import LoadTimes
from router.runtime.loader import LaunchSpec
from router.runtime.state import spec_for

log = logging.getLogger(__name__)

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
        KeyBook(),  # filled from the store by admin.keys_context
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
    app[KEYS] = policy.scoped
    app[UI_LOGINS] = LoginLimiter(settings.ui.login_failures_per_minute)
    _records(app, settings, metrics or Metrics())
    app[SHUTDOWN] = _signal_self
    app[SESSIONS] = Sessions()
    app[INFLIGHT] = inflight
    app.cleanup_ctx.extend(_CONTEXTS)
    app.on_shutdown.append(lifetimes.begin_drain)
    app.on_response_prepare.append(queue_wait.on_prepare)
    app.on_response_prepare.append(trace_header.on_prepare)
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
    """The event bus and what listens to every event: the metrics, the load times and the
    KV save/restore history; the recorder of each request."""
    app[EVENTS] = EventBus(settings.ui.events_queue)
    app[METRICS] = metrics
    app[EVENTS].subscribe_callback(app[METRICS].on_event)
    app[LOAD_TIMES] = LoadTimes()
    app[EVENTS].subscribe_callback(app[LOAD_TIMES].on_event)
    app[EVENTS].add_enricher(app[LOAD_TIMES].enrich)
    app[KV_HISTORY] = KvHistory()
    app[EVENTS].subscribe_callback(app[KV_HISTORY].on_event)
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


async def _pooled(app: web.Application) -> AsyncIterator[None]:
    """The memory this node lends over RPC (docs/cluster.md, "Pooled memory"): its leases'
    servers stop before the runtimes do, and a lease's bytes sit in the runtimes' ledger."""
    settings = app[SETTINGS]
    folder = lifetimes.state_dir(settings)
    app[POOLED] = lender = Lender(
        settings.pooled,
        settings.cluster.node_id,
        app[RUNTIMES],  # a lease's end wakes the loads waiting for its bytes
        folder,
        folder / "pids",
    )
    app[RUNTIMES].ledger.reclaim_lent = lender.reclaim  # its own loads ask lent memory back
    # vLLM leases run this node's own config of the model (docs/cluster.md, "vLLM multi-node").
    followers = VllmFollowers(settings, app[CATALOG].own_file, folder / "pids")
    lender.start_follower = followers.start
    yield
    await lender.close()


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
        prefixes = app[KV_CACHES].conversations.library.prefixes()
        return node_models(
            configs,
            runtimes.views(),
            disabled=disabled,
            missing=missing,
            memory=memory,
            prefixes=prefixes,
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
    app[POOLED].ask_master = functools.partial(ask_master, service)
    yield


async def _borrower(app: web.Application) -> AsyncIterator[None]:
    """A master's models that span nodes (docs/cluster.md, "Pooled memory"): a swap hook
    that leases before llama-server starts and releases when its process is gone."""
    settings = app[SETTINGS]
    if settings.cluster.role != "master":
        yield
        return
    runtimes = app[RUNTIMES]
    holdings = runtimes.ledger.holdings

    def need(spec: LaunchSpec) -> int:  # one rank's part of a vLLM gang: each follower's share
        whole = holdings.need(spec_for(spec.config, spec.lane))[0]
        return gang_share(whole, gang_size(spec.config, spec.lane)).total

    borrower = Borrower(
        app[CLUSTER],
        runtimes.ledger.room_for,
        settings.pooled.lease_ttl,
        lambda runtime: runtimes.unload(runtime.spec.occupies, model=runtime.config.id),
        GangHome(settings.pooled, need),
    )
    runtimes.hooks.add(borrower)
    # Its memory decision counts only the host's share of a spread model (docs/cluster.md).
    runtimes.ledger.holdings.spreads = lambda spec: spans(spec.config, spec.lane)
    runtimes.ledger.holdings.ranks = lambda spec: gang_size(spec.config, spec.lane)
    runtimes.ledger.holdings.remote = borrower.remote
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
    lifetimes.store_context,
    admin.keys_context,  # scoped keys, loaded from the store
    lifetimes.catalog_context,
    lifetimes.backend_setup_context,
    lifetimes.figures_context,
    lifetimes.runtimes_context,
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
    lifetimes.lending_context,
    site.downloads_context,  # before the cluster announces this node
    _cluster,
    site.webuis_context,
)
