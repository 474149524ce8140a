"""Process-tree observer for process tests: after a test, nothing of ours survives.

The test process makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so a grandchild
orphaned by a dying wrapper is re-parented to the test process instead of to init: every
escapee stays visible as a descendant here, and an unreaped one shows up as our zombie.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import time

import psutil

PR_SET_CHILD_SUBREAPER = 36


def enable_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _describe(p: psutil.Process) -> str:
    try:
        return f"pid {p.pid} ({p.status()}): {' '.join(p.cmdline())[:160]}"
    except psutil.Error:
        return f"pid {p.pid} (gone)"


def live_descendants(ignore: frozenset[int] = frozenset()) -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in ignore and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


async def survivors(within: float = 10.0) -> list[psutil.Process]:
    """The descendants still alive once `within` seconds have passed, or none as soon as all
    are gone. A closed router's helpers (the watchdog, the store's writer) exit on their own
    after it closes, so a check made at once would count them on a busy machine."""
    deadline = time.monotonic() + within
    # Grandchildren have no exit to await from here: their parent, not us, reaps them.
    while (left := live_descendants()) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    return left


def zombie_children() -> list[int]:
    out = []
    for p in psutil.Process().children():
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def reap_zombie_children() -> list[int]:
    """Reap zombies re-parented to us; only for tests that orphan processes on purpose."""
    reaped = []
    for pid in zombie_children():
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped.append(pid)
        except ChildProcessError:
            pass
    return reaped


def leftovers(settle: float = 3.0, ignore: frozenset[int] = frozenset()) -> list[str]:
    """Poll up to `settle` seconds for the tree to empty; describe what remains."""
    deadline = time.monotonic() + settle
    while True:
        live = live_descendants(ignore)
        zombies = zombie_children()
        if not live and not zombies:
            return []
        if time.monotonic() >= deadline:
            found = [_describe(p) for p in live]
            return found + [f"zombie child pid {pid}" for pid in zombies]
        time.sleep(0.05)


def assert_no_leftovers(settle: float = 3.0, ignore: frozenset[int] = frozenset()) -> None:
    found = leftovers(settle, ignore)
    if found:
        # Kill them so one failure does not cascade into every later test.
        for p in live_descendants(ignore):
            try:
                p.kill()
            except psutil.Error:
                pass
        time.sleep(0.1)
        reap_zombie_children()
    assert not found, "processes left behind:\n  " + "\n  ".join(found)
