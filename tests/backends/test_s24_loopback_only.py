"""S24 with the fake backend launched through the real supervisor: it listens on 127.0.0.1
only (the router launches it with `--host 127.0.0.1`), and its port refuses connections that
come through this machine's other addresses. tests/real/test_s24_s27_real.py checks the
same with the real llama-server."""

from __future__ import annotations

import os
import socket

import pytest

from tests.support.harness import RouterHarness
from tests.support.loopback_only import assert_loopback_only, listening


async def test_s24_a_launched_backend_listens_on_loopback_only(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    assert runtime.process is not None and runtime.process.pid is not None
    ports = assert_loopback_only(runtime.process.pid)
    assert runtime.base_url.endswith(f":{ports[0]}")


def test_s24_the_check_fails_for_a_wildcard_listener() -> None:
    """The control: a socket bound to every address is caught by the same check."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as wide:
        wide.bind(("0.0.0.0", 0))
        wide.listen()
        assert listening(os.getpid())
        with pytest.raises(AssertionError, match="beyond loopback"):
            assert_loopback_only(os.getpid())
