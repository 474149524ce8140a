"""Bytes sent to a lending node's RPC server, from the kernel's TCP counters (`ss -ti`'s
`bytes_sent`, Linux 4.19+). Read on the master: llama-server is the only client of a lease's
endpoint, so the counters of the sockets connected to it are what that load sent, including
what the node's tensor cache spared (a cached tensor costs a hash, not its bytes)."""

from __future__ import annotations

import re
import shutil
import subprocess

_SENT = re.compile(r"bytes_sent:(\d+)")
TIMEOUT = 2.0  # `ss` answers in milliseconds; a wedged one must not hold the caller


def bytes_sent(endpoint: str) -> int | None:
    """The bytes every established connection to `endpoint` (IPv4 `host:port`) has sent;
    None when `ss` is missing or failed, 0 when nothing is connected."""
    ss = shutil.which("ss")
    if ss is None:
        return None
    try:
        out = subprocess.run(
            [ss, "-tinH", "state", "established", "dst", endpoint],
            capture_output=True,
            text=True,
            check=True,
            timeout=TIMEOUT,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(int(found) for found in _SENT.findall(out))


__all__ = ["bytes_sent"]
