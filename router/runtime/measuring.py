"""Measuring each load for the memory ledger (issue 25, docs/residency.md "Measurements").

The runtime manager holds one `FigureHooks` (`figures`, default `NoFigureHooks`) and tells it
two things: a runtime became READY (`loaded`, with the memory-report lines its backend
printed during the load) and a load failed (`failed`). `Measuring` turns those into figures in
a `FigureBook` (cached, stored), off the event loop; the ledger reads them back with
`lookup(config_id, fingerprint)` (router/memory/figures.py), the fingerprint being
`launch_fingerprint(config, lane, family, settings, devices)`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Protocol

from router.config import Settings
from router.config.schema import PROGRAM_SECTIONS, ProgramSection
from router.errors import LoadFailed, RouterError
from router.memory.book import FigureBook
from router.memory.devices import Device, load_nvml
from router.memory.figures import Figures, Measured, NoFigures
from router.memory.fingerprint import launch_fingerprint
from router.memory.measure import Method, measure_process, out_of_memory, raised_figure
from router.memory.sizing import estimate_config
from router.memory.status import machine_devices
from router.runtime.hooks import SwapHook
from router.runtime.loader import Launched, LaunchSpec
from router.runtime.state import Runtime

log = logging.getLogger(__name__)
CLOSE_WAIT_S = 5.0  # bound on finishing measurements when the router stops


class FigureHooks(Figures, Protocol):
    """What the runtime manager calls; `lookup` is the ledger's side (Figures)."""

    def loaded(self, runtime: Runtime, launched: Launched, lines: Sequence[str]) -> None: ...
    def failed(self, runtime: Runtime, error: RouterError) -> bool: ...
    async def settled(self) -> None: ...


class NoFigureHooks(NoFigures):
    """Nothing measured, nothing recorded (tests of the manager; the default)."""

    def loaded(self, runtime: Runtime, launched: Launched, lines: Sequence[str]) -> None:
        return None

    def failed(self, runtime: Runtime, error: RouterError) -> bool:
        return False

    async def settled(self) -> None:
        return None


class Measuring(SwapHook):
    """Measures each READY runtime and each out-of-memory failure into `book`."""

    def __init__(
        self,
        book: FigureBook,
        settings: Settings,
        devices: Callable[[], tuple[Device, ...]] = machine_devices,
        nvml_loader: Callable[[], ModuleType | Any | None] = load_nvml,
    ) -> None:
        self.book = book
        self._settings = settings
        self._devices = devices
        self._nvml_loader = nvml_loader
        self._tasks: set[asyncio.Task[None]] = set()

    def lookup(self, config_id: str, fingerprint: str) -> Measured | None:
        return self.book.lookup(config_id, fingerprint)

    def loaded(self, runtime: Runtime, launched: Launched, lines: Sequence[str]) -> None:
        pid = launched.process.pid
        if pid is not None:
            self._spawn(self._measure(runtime.spec, pid, list(lines), launched.load_seconds))

    def failed(self, runtime: Runtime, error: RouterError) -> bool:
        """Records a raised figure when the load ran out of memory; says whether it did (the
        manager retries such a load once after a further eviction, after `settled()`)."""
        tail, code = (
            (error.output_tail, error.exit_code) if isinstance(error, LoadFailed) else ((), None)
        )
        if not out_of_memory(error.message, tail, code):
            return False
        self._spawn(self._raise(runtime.spec))
        return True

    # ---- the swap hook (router/runtime/hooks.py) ------------------------------------------

    async def after_ready(
        self, runtime: Runtime, launched: Launched, report: Sequence[str]
    ) -> None:
        self.loaded(runtime, launched, report)

    def load_failed(self, runtime: Runtime, error: RouterError) -> bool:
        return self.failed(runtime, error)

    async def settled(self) -> None:
        """Every measurement started so far is in the book."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.settled(), CLOSE_WAIT_S)
        except TimeoutError:
            for task in self._tasks:
                task.cancel()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _fingerprint(self, spec: LaunchSpec, devices: Sequence[Device]) -> str:
        return launch_fingerprint(spec.config, spec.lane, spec.family, self._settings, devices)

    async def _measure(
        self, spec: LaunchSpec, pid: int, lines: list[str], load_seconds: float
    ) -> None:
        try:
            done = await asyncio.to_thread(self._measure_now, spec, pid, lines, load_seconds)
            if done is not None:
                fingerprint, measured, method = done
                await self.book.record(spec.config.id, fingerprint, measured, method)
        except RouterError as exc:  # the store refused the write (disk full, read-only)
            log.warning("measured memory of %s not kept: %s", spec.key, exc.message)
        except Exception:  # a measurement must never disturb serving
            log.exception("measuring the memory of %s failed", spec.key)

    def _measure_now(
        self, spec: LaunchSpec, pid: int, lines: list[str], load_seconds: float
    ) -> tuple[str, Measured, Method] | None:
        devices = self._devices()
        nvml = self._nvml_loader() if any(d.is_gpu for d in devices) else None
        found = measure_process(pid, lines, spec.family.value, nvml, load_seconds)
        if found is None:
            return None
        return self._fingerprint(spec, devices), *found

    async def _raise(self, spec: LaunchSpec) -> None:
        try:
            fingerprint, devices = await asyncio.to_thread(self._raise_inputs, spec)
            raised = raised_figure(devices, self.book.lookup(spec.config.id, fingerprint))
            measured = Measured(raised, None, oom=True)
            await self.book.record(spec.config.id, fingerprint, measured, "raised")
            log.warning("%s ran out of memory while loading: figure raised to %s", spec.key, raised)
        except RouterError as exc:
            log.warning("raised memory figure of %s not kept: %s", spec.key, exc.message)
        except Exception:
            log.exception("raising the memory figure of %s failed", spec.key)

    def _raise_inputs(self, spec: LaunchSpec) -> tuple[str, dict[str, int]]:
        devices = self._devices()
        section = getattr(self._settings, PROGRAM_SECTIONS[spec.family])
        env = section.env if isinstance(section, ProgramSection) else {}
        estimate = estimate_config(spec.config, spec.lane, spec.family, devices, env)
        return self._fingerprint(spec, devices), dict(estimate.devices)


__all__ = ["FigureHooks", "Measuring", "NoFigureHooks"]
