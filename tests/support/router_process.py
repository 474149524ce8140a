"""A real `tensor-router start` process for the tests that need one (R4, R27, R28, S1, S3).

Each router writes a router.yaml (trusted_lan, loopback bind on a free port, program sections
pointing at fake backends) and runs the CLI as a subprocess. The test process is a child
subreaper, so backends orphaned by a killed router are re-parented here: visible, and reaped.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from tests.support.harness import PROGRAM_SECTIONS, RouterHarness, free_port, wait_for

CLI = Path(sys.executable).with_name("tensor-router")
# A router answers /health 2-3 s after its launch on a quiet box (importing it alone takes
# 1.3-1.7 s). On a 2-core machine at load 10 (two suites at once, backends compiling) 15 s
# was not enough: 22 cluster tests failed with an empty log and all passed alone. The bound
# costs time only when a router really never answers; one that exits fails at once.
START_BOUND = 90.0
HEALTH_POLL = 0.1  # seconds between /health attempts (each has its own 2 s timeout)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class RouterProcess:
    """`tensor-router start --config router.yaml` with fake backends, on a free port.

    `name` keeps a second router of the same test apart (its own YAML, log and data folder).
    """

    def __init__(
        self,
        h: RouterHarness,
        server: dict[str, Any] | None = None,
        name: str = "router",
        *,
        port: int | None = None,
        kcpps_dir: Path | None = None,
        extra: dict[str, Any] | None = None,
        **runtime: object,
    ) -> None:
        """`extra`: more top-level YAML sections (cluster, auth); `kcpps_dir`: this router's
        own configurations (a cluster test gives each node its own)."""
        self.h = h
        self.name = name
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config = h.tmp / f"{name}.yaml"
        self.log = h.tmp / f"{name}.log"
        data = h.tmp / ("data" if name == "router" else f"data-{name}")
        self.proc: subprocess.Popen[bytes] | None = None
        sections = {}
        for family, section in PROGRAM_SECTIONS.items():
            env = {"FAKE_BACKEND": h.faults[family]} if family in h.faults else {}
            sections[section] = {"binary_path": str(h.binary(family)), "env": env}
        self.config.write_text(
            yaml.safe_dump(
                {
                    "security": {"profile": "trusted_lan"},
                    "server": {"bind": f"127.0.0.1:{self.port}", **(server or {})},
                    "models": {"config_dir": str(kcpps_dir or h.kcpps_dir)},
                    "analytics": {"database_path": str(data / "router.sqlite")},
                    "runtime": {
                        "residency": "lane",
                        "stop_grace": 1,
                        "load_timeout": 20,
                        **runtime,
                    },
                    **sections,
                    **(extra or {}),
                }
            )
        )

    def launch(self) -> None:
        """Start the process without waiting for it to answer (for one that should stop)."""
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(CLI), "start", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def start(self) -> None:
        self.launch()
        await self.answered()

    async def answered(self, bound: float | None = None) -> None:
        """Wait for the launched process's first 200 on /health; fail at once, with its log,
        when it exits first, and with its log when `bound` (START_BOUND) passes."""
        bound = START_BOUND if bound is None else bound
        assert self.proc is not None
        end = time.monotonic() + bound
        async with httpx.AsyncClient(base_url=self.base) as c:
            while time.monotonic() < end:
                code = self.proc.poll()
                if code is not None:
                    raise AssertionError(
                        f"the router exited with code {code} before it answered /health:\n"
                        + self.log.read_text()[-4000:]
                    )
                try:
                    if (await c.get("/health", timeout=2)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(HEALTH_POLL)
        raise AssertionError(
            f"the router never answered /health within {bound:.0f} s (still running; an empty "
            "log means it had not even finished its imports):\n" + self.log.read_text()[-4000:]
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def wait_exit(self, deadline: float) -> int | None:
        assert self.proc is not None
        await wait_for(lambda: self.proc.poll() is not None, deadline)
        return self.proc.poll()

    def descendants(self) -> list[int]:
        return [p.pid for p in psutil.Process(self.pid).children(recursive=True)]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def new_router(
    h: RouterHarness,
    server: dict[str, Any] | None = None,
    name: str = "router",
    *,
    port: int | None = None,
    kcpps_dir: Path | None = None,
    extra: dict[str, Any] | None = None,
    **runtime: object,
) -> RouterProcess:
    r = RouterProcess(h, server, name, port=port, kcpps_dir=kcpps_dir, extra=extra, **runtime)
    h.routers.append(r)  # type: ignore[attr-defined]
    return r
