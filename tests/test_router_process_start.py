"""tests/support/router_process.py waits for a started router long enough for a busy machine
(START_BOUND), and reports one that exits before it answers at once, with its log.

A stand-in program takes the router's place: it answers /health after a delay longer than the
15 s the bound used to be (a router at load 10 needed that), or exits at once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.harness import RouterHarness
from tests.support.router_process import START_BOUND, RouterProcess

STAND_IN = """
import http.server, sys, time
print("stand-in starting", flush=True)
time.sleep(float(sys.argv[2]))
if sys.argv[3] == "exit":
    print("stand-in: cannot start", flush=True)
    sys.exit(3)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def stand_in(tmp_path: Path, delay: float, then: str) -> RouterProcess:
    router = RouterProcess(RouterHarness(tmp_path))

    def launch() -> None:
        with router.log.open("ab") as log:
            router.proc = subprocess.Popen(
                [sys.executable, "-c", STAND_IN, str(router.port), str(delay), then],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    router.launch = launch  # type: ignore[method-assign]
    return router


@pytest.mark.timeout(START_BOUND + 60)
async def test_a_router_slow_to_answer_is_waited_for(tmp_path: Path) -> None:
    router = stand_in(tmp_path, 20.0, "serve")
    try:
        began = time.monotonic()
        await router.start()
        assert time.monotonic() - began >= 20.0
    finally:
        router.kill()


async def test_a_router_that_exits_first_is_reported_at_once_with_its_log(tmp_path: Path) -> None:
    router = stand_in(tmp_path, 0.0, "exit")
    began = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        await router.start()
    assert time.monotonic() - began < START_BOUND / 2  # not the bound: its exit ended the wait
    assert "exited with code 3" in str(failure.value)
    assert "stand-in: cannot start" in str(failure.value)
