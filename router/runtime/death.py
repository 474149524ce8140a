"""Is a backend that failed a request before any answer really gone? (R9, R31)

The proxy cannot tell a dead backend from a live one that reset the connection; the process
can. Asked by the manager (`RuntimeManager.confirm_death`), never by a handler.
"""

from __future__ import annotations

import asyncio

from router.runtime.loader import port_in_use
from router.runtime.state import Runtime

DEATH_GRACE_S = 0.25  # the exit of a killed backend is seen within milliseconds
# A backend whose listening port is already closed is on its way out, but a crash that frees
# gigabytes, on a busy machine, is reaped later than that: its exit is awaited this long.
DYING_GRACE_S = 10.0


async def exit_code(runtime: Runtime) -> int | None:
    """The exit code of the runtime's process once it has exited; None while it still
    listens (alive, or hung: its failure stands) or when it does not exit within the grace."""
    process = runtime.process
    if process is None:
        return None
    try:
        return await asyncio.wait_for(asyncio.shield(process.wait_exit()), DEATH_GRACE_S)
    except TimeoutError:
        if not runtime.port or port_in_use(runtime.port):
            return None
    try:
        return await asyncio.wait_for(asyncio.shield(process.wait_exit()), DYING_GRACE_S)
    except TimeoutError:
        return None
