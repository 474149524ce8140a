"""The RPC servers' tensor cache (`rpc-server -c`, under `$LLAMA_CACHE/rpc`): llama.cpp keeps
it with no size limit, so the node prunes it to `pooled.cache_budget`, oldest files
first, and only while no lease runs (a running server may be writing or reading a file)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def cache_home(state: Path) -> Path:
    """`LLAMA_CACHE` for the RPC servers: llama.cpp adds `rpc/` below it."""
    return state / "rpc-cache"


def prune(home: Path, budget: int) -> int:
    """Delete the oldest cached tensors until the folder holds at most `budget` bytes; the
    bytes removed. Runs off the event loop (blocking file calls)."""
    folder = home / "rpc"
    try:
        files = [(p.stat().st_mtime, p.stat().st_size, p) for p in folder.iterdir() if p.is_file()]
    except OSError:
        return 0
    total = sum(size for _, size, _ in files)
    removed = 0
    for _, size, path in sorted(files):
        if total <= budget:
            break
        try:
            path.unlink()
        except OSError as exc:
            log.warning("cannot prune the RPC tensor cache: %s", exc)
            break
        total -= size
        removed += size
    return removed


__all__ = ["cache_home", "prune"]
