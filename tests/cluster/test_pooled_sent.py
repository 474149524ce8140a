"""The load capture's RPC bytes (router/cluster/pooled/sent.py): `ss` runs as a child the
event loop awaits (argv, no shell), its counters summed; a wedged one is killed at the bound
while the loop keeps serving. A fake `ss` on PATH stands in for the real one."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import psutil
import pytest

from router.cluster.pooled import sent

LINES = (
    "0 0 127.0.0.1:41000 127.0.0.1:50100\n\t cubic bytes_sent:1200 bytes_acked:1200\n"
    "0 0 127.0.0.1:41002 127.0.0.1:50100\n\t cubic bytes_sent:34 bytes_acked:34\n"
)


def _fake_ss(folder: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    script = folder / "ss"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


async def test_the_counters_of_every_connection_to_the_endpoint_are_summed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = tmp_path / "argv"
    _fake_ss(tmp_path, f'printf "%s\\n" "$@" > {argv}\nprintf "{LINES}"', monkeypatch)
    assert await sent.bytes_sent("127.0.0.1:50100") == 1234
    assert argv.read_text().split() == ["-tinH", "state", "established", "dst", "127.0.0.1:50100"]
    _fake_ss(tmp_path, "exit 1", monkeypatch)
    assert await sent.bytes_sent("127.0.0.1:50100") is None  # failed: no figure, no error


async def test_a_wedged_ss_is_killed_at_the_bound_and_never_holds_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "pid"
    _fake_ss(tmp_path, f"echo $$ > {pidfile}\nexec sleep 60", monkeypatch)
    begun = time.monotonic()
    task = asyncio.create_task(sent.bytes_sent("127.0.0.1:50100"))
    await asyncio.sleep(0.2)  # one turn of the loop while `ss` runs
    assert time.monotonic() - begun < sent.TIMEOUT and not task.done()  # not blocked by it
    assert await asyncio.wait_for(task, sent.TIMEOUT + 30) is None
    pid = int(pidfile.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
