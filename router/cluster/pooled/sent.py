"""Bytes sent to a lending node's RPC server, from the kernel's TCP counters (`ss -ti`'s
`bytes_sent`, Linux 4.19+). Read on the master: llama-server is the only client of a lease's
endpoint, so the counters of the sockets connected to it are what that load sent, including
what the node's tensor cache spared (a cached tensor costs a hash, not its bytes). `ss` runs
as a child process awaited on the event loop (argv only), never blocking it."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil

_SENT = re.compile(r"bytes_sent:(\d+)")
TIMEOUT = 2.0  # `ss` answers in milliseconds; a wedged one must not hold the caller


async def bytes_sent(endpoint: str) -> int | None:
    """The bytes every established connection to `endpoint` (IPv4 `host:port`) has sent;
    None when `ss` is missing, failed or took longer than TIMEOUT, 0 when nothing is
    connected."""
    ss = shutil.which("ss")
    if ss is None:
        return None
    argv = [ss, "-tinH", "state", "established", "dst", endpoint]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return None
    if proc.returncode != 0:
        return None
    return sum(int(found) for found in _SENT.findall(out.decode(errors="replace")))


__all__ = ["bytes_sent"]
