"""Run the app: the guarded listener, signals, and the graceful stop of R27.

SIGTERM or SIGINT: the listener closes at once; open realtime sessions are closed with 1001;
queued requests get 503; every request in flight (served here, relayed, lent, translated, event
streams, ComfyUI jobs: router/edge/inflight.py) finishes up to `runtime.drain_timeout`, and what
still runs then ends with its stream's terminal error event; then every backend is stopped and
buffered analytics are flushed (the cleanup contexts of create_app, in reverse order).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import resource
import signal
import socket
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from aiohttp import web

from router import tracing
from router.app import create_app, create_backend_ui_app
from router.appkeys import INFLIGHT, RUNTIMES, SESSIONS, SHUTDOWN, WEBUIS
from router.config import Settings
from router.edge import listener
from router.edge.connection_caps import ConnectionGuard
from router.webuis import Listener

log = logging.getLogger(__name__)

# After the drain, handlers that hold no lease (event-stream subscribers, control calls) get
# this long before they are cancelled; aiohttp waits it twice (finish, then cancel-and-wait).
HANDLER_GRACE = 0.25


# The cyclic collector took ~11 % of the event loop at saturation (py-spy): young collections
# every 700 allocations, and full ones rescanning everything built at start-up. Start-up objects
# live as long as the router, so they are frozen out of the scans, and young collections run
# every 10,000 allocations; requests' short-lived cycles are still collected young.
# Measured: +14 % requests per second, the same idle RSS (bench/RESULTS.md).
GC_THRESHOLDS = (10_000, 10, 10)
# File descriptors beyond the connection cap: backends' pipes and sockets, the store, logs.
FD_HEADROOM = 256


def raise_fd_limit(max_connections: int) -> None:
    """Lift the soft open-file limit toward the hard one so the connection cap fits under it:
    systemd and most shells start services at 1024, which is the default cap alone."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_connections + FD_HEADROOM
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning(
            "the open-file limit (%d) is below server.max_connections + %d; raise LimitNOFILE "
            "or lower server.max_connections",
            soft,
            FD_HEADROOM,
        )


def _tune_gc() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def _master_addresses(settings: Settings) -> frozenset[str]:
    """A slave's master, as the addresses its connections come from (resolved once, at start)."""
    url = settings.cluster.master_url
    if settings.cluster.role != "slave" or not url:
        return frozenset()
    host, port = urlsplit(url).hostname, urlsplit(url).port or 80
    if not host:
        return frozenset()
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        log.warning("cannot resolve the master %s (%s): its connections count per peer", host, err)
        return frozenset()
    return frozenset(str(info[4][0]) for info in infos)


async def serve(
    settings: Settings,
    *,
    extra_binds: Sequence[tuple[str, int]] = (),
    on_ready: Callable[[list[str]], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    raise_fd_limit(settings.server.max_connections)
    tracing.enable_from_environment()  # OTEL_EXPORTER_OTLP_ENDPOINT (docs/observability.md)
    app = create_app(settings)
    stop = stop or asyncio.Event()
    app[SHUTDOWN] = stop.set
    runner = _runner(app, settings)
    await runner.setup()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ui_runner: web.AppRunner | None = None
    try:
        # One guard for every listener: the connection cap covers the whole router.
        guard = ConnectionGuard(settings)
        guard.cluster_peers = await _master_addresses(settings)
        sites = await _listen(runner, settings, extra_binds, guard)
        names = [site.name for site in sites]
        ui_runner = _backend_ui_runner(app, settings)
        if ui_runner is not None:
            await ui_runner.setup()
            sites.append(await _start_backend_ui(app, ui_runner, settings, guard))
            log.info("backend WebUIs on %s", sites[-1].name)
        _tune_gc()
        log.info("tensor-router listening on %s", ", ".join(names))
        if on_ready:
            on_ready(names)
        await stop.wait()
        log.info("stopping: draining running requests (up to %gs)", settings.runtime.drain_timeout)
        await _drain(app, sites, settings.runtime.drain_timeout)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if ui_runner is not None:  # it borrows the main app's resources: closed first
            await ui_runner.cleanup()
        await runner.cleanup()
        # The last spans leave in the stop budget; the exporter's HTTP client blocks.
        await asyncio.to_thread(tracing.close)


def _runner(app: web.Application, settings: Settings) -> web.AppRunner:
    return web.AppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=HANDLER_GRACE,  # the drain itself is _drain() below (R27/R28)
        handler_cancellation=True,
        access_log=None,
        **listener.runner_kwargs(settings),
    )


async def _listen(
    runner: web.AppRunner,
    settings: Settings,
    extra_binds: Sequence[tuple[str, int]],
    guard: ConnectionGuard,
) -> list[listener.GuardedTCPSite]:
    """The `server.bind` listener and the `--ollama` ones, bound (ListenError otherwise)."""
    sites = [listener.capped_site(runner, settings, guard=guard)]
    sites += [
        listener.capped_site(runner, settings, host, port, guard=guard)
        for host, port in extra_binds
    ]
    server = settings.server
    binds = [(server.host, server.port, "server.bind")]
    binds += [(host, port, "--ollama") for host, port in extra_binds]
    for site, (host, port, setting) in zip(sites, binds, strict=True):
        await _bind(site, host, port, setting)
    return sites


class ListenError(OSError):
    """A listener could not bind at start: one line naming the address and the setting
    (the CLI prints it, no traceback)."""


def _bind_failure(host: str, port: int, setting: str, exc: OSError) -> str:
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    reason = (
        "is already in use"
        if exc.errno == errno.EADDRINUSE
        else f"cannot be bound ({exc.strerror or exc})"
    )
    return f"cannot listen on {address}: the address {reason}; change {setting} or stop the other program"


async def _bind(site: listener.GuardedTCPSite, host: str, port: int, setting: str) -> None:
    try:
        await site.start()
    except OSError as exc:
        raise ListenError(_bind_failure(host, port, setting, exc)) from None


def _backend_ui_runner(app: web.Application, settings: Settings) -> web.AppRunner | None:
    # A slave serves no management routes, so no ticket could ever open its listener.
    if settings.server.backend_ui_address() is None or settings.cluster.role == "slave":
        return None
    return web.AppRunner(
        create_backend_ui_app(app),
        handle_signals=False,
        shutdown_timeout=HANDLER_GRACE,
        handler_cancellation=True,
        access_log=None,
        **listener.runner_kwargs(settings),
    )


async def _start_backend_ui(
    app: web.Application, runner: web.AppRunner, settings: Settings, guard: ConnectionGuard
) -> listener.GuardedTCPSite:
    """The backend-UI listener (docs/webuis.md). Under `auto` a taken port + 1 is not fatal:
    browsers reach the listener only through the redirect, which names whatever port it got."""
    address = settings.server.backend_ui_address()
    assert address is not None
    host, port = address
    site = listener.capped_site(runner, settings, host, port, guard=guard)
    try:
        await site.start()
    except OSError as exc:
        if settings.server.backend_ui_bind != "auto" or port == 0:
            raise ListenError(_bind_failure(host, port, "server.backend_ui_bind", exc)) from None
        log.warning("backend WebUIs: port %d is taken (%s); using a free port", port, exc)
        site = listener.capped_site(runner, settings, host, 0, guard=guard)
        await site.start()
    app[WEBUIS].listener = Listener(host, site.port, settings.server.backend_ui_public_url)
    return site


async def _drain(app: web.Application, sites: Sequence[web.BaseSite], drain_timeout: float) -> None:
    """Graceful stop (R27/R28), before aiohttp's own shutdown.

    aiohttp alone would wait `shutdown_timeout` for *every* open handler, idle event-stream
    subscribers included, and then up to the same time again after cancelling them (twice the
    deadline, R28), and streams still running at the deadline would be cut without an error
    event. Instead: close the listeners at once, refuse queued and new work (503), wait up to
    `drain_timeout` for every request in flight to end (the in-flight registry, an event: a
    relayed request holds no lease here), end what still runs with its stream's terminal error
    event, then stop every backend. Realtime sessions hold a lease but no work that ends by
    itself: they are closed first, with 1001 (R28).
    """
    for site in sites:
        await site.stop()
    app[SESSIONS].going_away()
    app[RUNTIMES].refuse_new_work()
    loop = asyncio.get_running_loop()
    until = loop.time() + drain_timeout
    if not await app[INFLIGHT].drain(drain_timeout):
        log.warning("the drain deadline passed: %d requests were ended", len(app[INFLIGHT]))
    # Leases outside any request (a load the start-up began) get what is left of the deadline.
    await app[RUNTIMES].shutdown(max(0.0, until - loop.time()))
