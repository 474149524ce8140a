"""Launch one backend process and wait until it is really ready (DESIGN.md section 4).

Ready means: the backend's own probe answered as ready, the answer came from the process we
started (identity check), and that process is still alive. A child that exits first fails the
load at once, whatever its exit code (sd-server exits 0 when its port is taken); one that
prints nothing for `no_progress_timeout` fails then; everything is bounded by `load_timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from backends.base import Backend, BackendError, child_environ
from backends.process import SupervisedProcess
from backends.registry import adapter_for
from router.backend_client import BackendClient
from router.config import ModelConfig, Settings
from router.domain import Family, Lane
from router.errors import BackendExited, LoadFailed

log = logging.getLogger(__name__)
OutputSink = Callable[[str, bytes], None]


@dataclass(frozen=True)
class LaunchSpec:
    key: str
    config: ModelConfig
    lane: Lane
    family: Family


@dataclass
class Launched:
    process: SupervisedProcess
    port: int
    base_url: str
    local_model_id: str
    argv: list[str]
    load_seconds: float


class LaunchHooks(Protocol):
    """The swap hooks' launch side (router/runtime/hooks.py): argv additions (KV persistence's
    save folder) and the moment before the spawn (a read-ahead stops reading)."""

    def launch_args(self, spec: LaunchSpec) -> list[str]: ...
    def before_launch(self, spec: LaunchSpec) -> None: ...


PORT_ATTEMPTS = 3


def _probe_cap(elapsed: float) -> float:
    """Longest pause between readiness probes, `elapsed` seconds after the spawn."""
    return 0.005 if elapsed < 1.0 else 0.025 if elapsed < 3.0 else 0.25


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR: a port in TIME_WAIT is free for a backend; only a listener counts.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class _Start:
    """One spawned child on its way to ready: what the readiness checks read."""

    adapter: Backend
    process: SupervisedProcess
    base_url: str
    spec: LaunchSpec
    ready_line: asyncio.Event  # set when the child prints its ready line
    started: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class Loader:
    """Starts a backend process for a launch spec and waits until it serves (or fails)."""

    settings: Settings
    client: BackendClient
    pidfile_dir: Path
    # Environment decided at run time (vLLM's launch options), read at each spawn.
    env_overlay: Callable[[Family], Mapping[str, str]] | None = None
    # Arguments the router adds for its own features (KV persistence's --slot-save-path).
    hooks: LaunchHooks | None = None

    async def launch(
        self,
        spec: LaunchSpec,
        on_output: OutputSink | None = None,
        on_argv: Callable[[list[str]], None] | None = None,
    ) -> Launched:
        """Spawn and wait for readiness; `on_argv` sees the argv before the spawn (captures).

        The port is free when chosen but another process may bind it before the backend does
        (R5). No backend is started on a port known to be held: one found held before the
        spawn is skipped at the cost of a bind check, and a child that exits early because its
        port was taken under it is retried on a new port.
        """
        if self.hooks is not None:
            self.hooks.before_launch(spec)  # a read-ahead stops: the backend's reads take over
        taken: LoadFailed | None = None
        for attempt in range(1, PORT_ATTEMPTS + 1):
            port = free_port()
            if port_in_use(port):
                log.warning("%s: port %d is held (attempt %d)", spec.key, port, attempt)
                taken = taken or LoadFailed(
                    f"cannot start {spec.family} for {spec.config.id}: port {port} is in use by"
                    " another process"
                )
                continue
            try:
                return await self._launch_once(spec, port, on_output, on_argv)
            except BackendExited as exc:
                if not port_in_use(port):
                    raise
                log.warning(
                    "%s: port %d taken before it bound (attempt %d)", spec.key, port, attempt
                )
                taken = exc
        assert taken is not None
        raise taken

    async def _launch_once(
        self,
        spec: LaunchSpec,
        port: int,
        on_output: OutputSink | None,
        on_argv: Callable[[list[str]], None] | None,
    ) -> Launched:
        adapter = adapter_for(spec.family)
        ready_line = asyncio.Event()
        process, argv = await self._spawn(
            adapter, spec, port, _tee(on_output, adapter, ready_line), on_argv
        )
        start = _Start(adapter, process, f"http://127.0.0.1:{port}", spec, ready_line)
        await self._await_ready(start)
        process.detach_output()
        return Launched(
            process,
            port,
            start.base_url,
            adapter.local_model_id(spec.config, spec.lane),
            argv,
            time.monotonic() - start.started,
        )

    async def _spawn(
        self,
        adapter: Backend,
        spec: LaunchSpec,
        port: int,
        on_output: OutputSink,
        on_argv: Callable[[list[str]], None] | None,
    ) -> tuple[SupervisedProcess, list[str]]:
        name = spec.key.replace("/", "_").replace("@", "_")
        try:
            workdir = self._write_launch_files(adapter, spec, name)
            argv = adapter.argv(spec.config, spec.lane, port, self.settings, workdir=workdir)
            if self.hooks is not None:
                argv += self.hooks.launch_args(spec)
            env = child_environ(adapter, spec.config, spec.lane, self.settings, os.environ)
            if self.env_overlay is not None:
                env.update(self.env_overlay(spec.family))
        except BackendError as exc:
            raise LoadFailed(f"cannot launch {spec.config.id}: {exc}") from exc
        if on_argv is not None:
            on_argv(argv)
        process = SupervisedProcess(
            argv, env=env, cwd=None, name=name, pidfile_dir=self.pidfile_dir, on_output=on_output
        )
        try:
            await process.start()
        except OSError as exc:
            raise LoadFailed(
                f"cannot start {spec.family} for {spec.config.id}: {exc.strerror or exc}"
            ) from exc
        return process, argv

    async def _await_ready(self, start: _Start) -> None:
        """Ready within `load_timeout`, or the child is stopped and the load fails."""
        grace, process, spec = self.settings.runtime.stop_grace, start.process, start.spec
        try:
            await asyncio.wait_for(self._until_ready(start), self.settings.runtime.load_timeout)
        except TimeoutError:
            await process.stop(grace)
            raise _failed(
                LoadFailed,
                f"{spec.config.id} was not ready after {self.settings.runtime.load_timeout:g}s"
                f" (runtime.load_timeout){_tail(process)}",
                process,
            ) from None
        except BaseException:
            await asyncio.shield(process.stop(grace))
            raise

    def _write_launch_files(self, adapter: Backend, spec: LaunchSpec, name: str) -> Path | None:
        """Files a backend reads at start (KoboldCpp's cleaned .kcpps copy), in its own folder."""
        files = adapter.launch_files(spec.config, spec.lane, self.settings)
        if not files:
            return None
        workdir = self.pidfile_dir.parent / "launch" / name
        workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for file_name, data in files.items():
            (workdir / file_name).write_bytes(data)
        return workdir

    async def _until_ready(self, start: _Start) -> None:
        exited = asyncio.ensure_future(start.process.wait_exit())
        ready_line, delay = start.ready_line, 0.005
        try:
            while True:
                self._still_starting(start, exited)
                # Cleared before the probe, not after: a ready line printed while the probe
                # was in flight must wake the next wait at once.
                ready_line.clear()
                if await self._answers(start, exited):
                    if not exited.done():
                        return
                    continue
                waiter = asyncio.ensure_future(ready_line.wait())
                await asyncio.wait({exited, waiter}, timeout=delay)
                waiter.cancel()
                # Detection lag is the cold-start overhead, and log lines cannot shorten it:
                # llama.cpp logs from a worker thread, so "listening" reaches the pipe late.
                # Probe every 5 ms in the first second, 25 ms up to 3 s, 250 ms after.
                delay = min(delay * 2, _probe_cap(time.monotonic() - start.started))
        finally:
            exited.cancel()

    def _still_starting(self, start: _Start, exited: asyncio.Future[int]) -> None:
        """Raise when the child exited, or printed nothing for `no_progress_timeout`."""
        process, spec = start.process, start.spec
        if exited.done():
            raise _failed(
                BackendExited,
                f"{spec.family} for {spec.config.id} exited with code {exited.result()}"
                f" before it was ready{_tail(process)}",
                process,
                exited.result(),
            )
        no_progress = self.settings.runtime.no_progress_timeout
        last_sign = max(start.started, process.last_output_at)
        if no_progress and time.monotonic() - last_sign > no_progress:
            raise _failed(
                LoadFailed,
                f"{spec.config.id} printed nothing for {no_progress:g}s and is not ready"
                f" (runtime.no_progress_timeout){_tail(process)}",
                process,
            )

    async def _answers(self, start: _Start, exited: asyncio.Future[int]) -> bool:
        """Ready, and the answer came from our child (R5); False while not ready yet."""
        adapter, base_url, spec = start.adapter, start.base_url, start.spec
        if not await self._probe(adapter, base_url, exited):
            return False
        try:
            await self.client.verify(adapter, base_url, spec.config, spec.lane)
        except BackendError as exc:  # not our child answering (R5)
            raise _failed(LoadFailed, f"{spec.config.id}: {exc}", start.process) from exc
        return True

    async def _probe(self, adapter: Backend, base_url: str, exited: asyncio.Future[int]) -> bool:
        probe = asyncio.ensure_future(self.client.ready(adapter, base_url))
        pending: set[asyncio.Future[Any]] = {probe, exited}
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if not probe.done():
            probe.cancel()
            with contextlib.suppress(BaseException):
                await probe
            return False
        return bool(probe.result())


def _tee(sink: OutputSink | None, adapter: Backend, ready_line: asyncio.Event) -> OutputSink:
    pattern = adapter.ready_line

    def on_output(stream: str, line: bytes) -> None:
        if pattern is not None and pattern.search(line.decode("utf-8", "replace")):
            ready_line.set()
        if sink is not None:
            sink(stream, line)

    return on_output


def _failed(
    kind: type[LoadFailed], message: str, process: SupervisedProcess, exit_code: int | None = None
) -> LoadFailed:
    """A load error that also carries what the load-errors table keeps."""
    return kind(message, exit_code=exit_code, output_tail=tuple(process.tail(40)))


def _tail(process: SupervisedProcess, lines: int = 12) -> str:
    tail = [line for line in process.tail(lines) if line.strip()]
    return (": " + " | ".join(tail)) if tail else ""
