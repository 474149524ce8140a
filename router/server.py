"""Run the app: the guarded listener, signals, and the graceful stop of R27.

SIGTERM or SIGINT: the listener closes at once; queued requests get 503; running requests
finish up to `runtime.drain_timeout`; then every backend is stopped and buffered analytics are
flushed (the cleanup contexts of create_app, in reverse order).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence

from aiohttp import web

from router import listener
from router.app import create_app
from router.appkeys import SHUTDOWN
from router.settings import Settings

log = logging.getLogger(__name__)


async def serve(
    settings: Settings,
    *,
    extra_binds: Sequence[tuple[str, int]] = (),
    on_ready: Callable[[list[str]], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    app = create_app(settings)
    stop = stop or asyncio.Event()
    app[SHUTDOWN] = stop.set
    runner = web.AppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=settings.runtime.drain_timeout,
        handler_cancellation=True,
        access_log=None,
        **listener.runner_kwargs(settings),
    )
    await runner.setup()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        # One guard for every listener: the connection cap covers the whole router.
        guard = listener.ConnectionGuard(settings)
        sites = [listener.capped_site(runner, settings, guard=guard)]
        sites += [
            listener.capped_site(runner, settings, host, port, guard=guard)
            for host, port in extra_binds
        ]
        for site in sites:
            await site.start()
        names = [site.name for site in sites]
        log.info("tensor-router listening on %s", ", ".join(names))
        if on_ready:
            on_ready(names)
        await stop.wait()
        log.info("stopping: draining running requests (up to %gs)", settings.runtime.drain_timeout)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
