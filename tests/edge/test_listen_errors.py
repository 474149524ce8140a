"""A taken port at start is one line naming the address and the setting, not a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import free_port

pytestmark = pytest.mark.timeout(60)
CLI = Path(sys.executable).with_name("tensor-router")


def start(tmp_path: Path, server: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "kcpps").mkdir(exist_ok=True)
    config = tmp_path / "router.yaml"
    config.write_text(f"security:\n  profile: trusted_lan\nserver:\n{server}")
    return subprocess.run(
        [str(CLI), "start", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=45,
        cwd=tmp_path,
    )


@pytest.mark.parametrize("setting", ["server.bind", "server.backend_ui_bind"])
def test_a_taken_port_is_one_line(tmp_path: Path, setting: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        if setting == "server.bind":
            server = f"  bind: 127.0.0.1:{taken}\n"
        else:
            server = f"  bind: 127.0.0.1:{free_port()}\n  backend_ui_bind: 127.0.0.1:{taken}\n"
        done = start(tmp_path, server)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: cannot listen on 127.0.0.1:{taken}"), done.stderr[-2000:]
    assert "already in use" in last and setting in last
