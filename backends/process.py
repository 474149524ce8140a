"""A supervised backend process: own process group, death signal, TERM -> grace -> KILL.

Lifetime binding (a killed router leaves nothing behind, R4):
- The child runs in its own session/process group (setsid), so a signal to the group
  reaches a wrapper script and everything it started without touching the router.
- In the child, between fork and exec, prctl(PR_SET_PDEATHSIG, SIGKILL) ties it to the
  router; getppid() is checked afterwards because the router may already have died.
  PDEATHSIG fires when the *thread* that forked exits, so start() must run on the event
  loop thread (it does: Popen is called directly, never in an executor).
- PDEATHSIG only covers the direct child. Grandchildren are covered by one watchdog per
  router (backends/watchdog.py), which holds a pipe from the router and on EOF kills
  every process tagged with the router's tag, the recorded groups and recorded pids.
- Every child gets the environment variable TENSOR_ROUTER_TAG=<router>.<child>; it is
  inherited through wrappers and setsid(), which is how descendants that left the process
  group are still found (R3) by stop(), the watchdog and reap_stale().
- The router makes itself a child subreaper, so orphans of a dying wrapper are
  re-parented to it (findable, and reaped by stop()) instead of to init.
- A pidfile <name>.pid (pid, pgid, start ticks, boot id, tag) lets the next router's
  reap_stale() kill survivors if even the watchdog was killed; the start time guards
  against recycled pids.

Exit detection never waits on pipes (R2, python/cpython#119710): a pidfd registered with
the event loop fires the moment the child becomes a zombie, and os.waitpid(WNOHANG) reaps
it. Output keeps being read until EOF, which a grandchild may delay; that never delays
wait_exit(). When the child exits on its own, whatever it left behind is killed at once:
a wrapper must not daemonize the real server. The pipes themselves are read by
backends/output.py (ProcessOutput), which this supervisor holds.
"""

from __future__ import annotations

import asyncio
import ctypes
import enum
import logging
import os
import secrets
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from backends import watchdog as wd
from backends.output import ProcessOutput

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_KILL_WAIT = 5.0  # bound on waiting for SIGKILLed processes (D-state can delay death)

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_watchdog = wd.WatchdogClient()
_subreaper_set = False


class ProcStateError(RuntimeError):
    """An operation or state transition that the lifecycle does not allow."""


class ProcState(enum.Enum):
    STARTING = "starting"  # constructed, not yet spawned
    RUNNING = "running"  # spawned (readiness is the runtime's business)
    STOPPING = "stopping"  # stop() in progress
    EXITED = "exited"  # terminal


_ALLOWED = {
    ProcState.STARTING: {ProcState.RUNNING, ProcState.EXITED},
    ProcState.RUNNING: {ProcState.STOPPING, ProcState.EXITED},
    ProcState.STOPPING: {ProcState.EXITED},
    ProcState.EXITED: set(),
}


def check_transition(old: ProcState, new: ProcState) -> None:
    if new not in _ALLOWED[old]:
        raise ProcStateError(f"illegal process state transition {old.name} -> {new.name}")


def _child_setup(parent_pid: int) -> None:
    """Runs in the child between fork and exec; must stay minimal."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the router died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def _become_subreaper() -> None:
    global _subreaper_set
    if not _subreaper_set:
        _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _subreaper_set = True


def _pidfd_open(pid: int) -> int:
    return os.pidfd_open(pid)


class SupervisedProcess:
    """One backend child process. See the module docstring for the design.

    `env` is the child's complete environment (None: inherit the router's), plus the tag.
    `on_output(stream, line)` gets each stdout/stderr line as bytes without its line ending;
    lines longer than output.MAX_LINE arrive in pieces. Create, start and stop it on one
    event loop.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        name: str,
        pidfile_dir: Path | None = None,
        ring_lines: int = 400,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> None:
        if not argv:
            raise ValueError("argv must not be empty")
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"invalid process name {name!r}")
        self.argv = list(argv)
        self.name = name
        self._env = env  # None: inherit the router's environment; else the full environment
        self._cwd = cwd
        self._pidfile = pidfile_dir / f"{name}.pid" if pidfile_dir is not None else None
        self._output = ProcessOutput(name, ring_lines, on_output)
        self._tag = f"{_watchdog.router_tag}.{secrets.token_hex(8)}"
        self._state = ProcState.STARTING
        self._popen: subprocess.Popen[bytes] | None = None
        self._start_ticks = 0
        self._seen: dict[int, int] = {}  # pid -> start ticks of every tree member observed
        self._exited = asyncio.Event()
        self._stopper: asyncio.Task[int | None] | None = None
        self._cleanup: asyncio.Task[None] | None = None
        self._pidfd: int | None = None
        self.returncode: int | None = None

    # ---- public API -------------------------------------------------------------------

    @property
    def state(self) -> ProcState:
        return self._state

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def exited(self) -> asyncio.Event:
        """Set the moment the direct child has exited and been reaped."""
        return self._exited

    @property
    def last_output_at(self) -> float:
        """When the child last wrote a line (monotonic); the spawn time until the first line."""
        return self._output.last_output_at

    def tail(self, n: int = 50) -> list[str]:
        """The last n output lines of both streams, in arrival order."""
        return self._output.tail(n)

    def detach_output(self) -> None:
        """The backend serves: stop calling `on_output` and coalesce reads (ProcessOutput)."""
        self._output.detach()

    async def start(self) -> None:
        if self._state is not ProcState.STARTING or self._popen is not None:
            raise ProcStateError(f"start() in state {self._state.name}")
        loop = asyncio.get_running_loop()
        _become_subreaper()
        try:
            self._popen = self._spawn()
        except (OSError, subprocess.SubprocessError):
            self._set_state(ProcState.EXITED)
            raise
        self._record_spawn()
        self._output.attach(loop, {"stdout": self._popen.stdout, "stderr": self._popen.stderr})
        self._watch_exit(loop)
        self._set_state(ProcState.RUNNING)

    async def wait_exit(self) -> int:
        if self._popen is None:
            raise ProcStateError("wait_exit() on a process that was never spawned")
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    async def stop(self, grace: float) -> int | None:
        """TERM the tree, wait up to grace, KILL what is left; idempotent and concurrent-safe."""
        if self._stopper is None:
            self._stopper = asyncio.create_task(self._stop(grace))
        return await asyncio.shield(self._stopper)

    # ---- spawning ---------------------------------------------------------------------

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ if self._env is None else self._env)
        env[wd.TAG_VAR] = self._tag
        parent = os.getpid()
        # Popen on the loop thread on purpose: PDEATHSIG is bound to the forking thread.
        return subprocess.Popen(  # noqa: ASYNC220
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self._cwd,
            start_new_session=True,
            preexec_fn=lambda: _child_setup(parent),
        )

    def _record_spawn(self) -> None:
        pid = self._require_pid()
        st = wd.proc_stat(pid)
        self._start_ticks = st.start_ticks if st is not None else 0
        self._seen[pid] = self._start_ticks
        _watchdog.register(pid, pid, self._start_ticks)
        if self._pidfile is not None:
            self._pidfile.parent.mkdir(parents=True, exist_ok=True)
            wd.PidRecord(pid, pid, self._start_ticks, wd.boot_id(), self._tag).write(self._pidfile)

    def _require_pid(self) -> int:
        if self._popen is None:
            raise ProcStateError("process was never spawned")
        return self._popen.pid

    def _set_state(self, new: ProcState) -> None:
        check_transition(self._state, new)
        self._state = new

    # ---- exit detection ---------------------------------------------------------------

    def _watch_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        pid = self._require_pid()
        try:
            self._pidfd = _pidfd_open(pid)
        except OSError:  # kernel without pidfd (< 5.3): a thread blocks in waitpid
            fut = loop.run_in_executor(None, os.waitpid, pid, 0)
            fut.add_done_callback(lambda f: self._on_waited(f.result()[1]))
            return
        loop.add_reader(self._pidfd, self._on_pidfd)

    def _on_pidfd(self) -> None:
        pid = self._require_pid()
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # someone else reaped it; the code is lost
            log.warning("%s (pid %d) was reaped by someone else", self.name, pid)
            got, status = pid, 255 << 8
        if got == 0:
            return
        assert self._pidfd is not None
        asyncio.get_running_loop().remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = None
        self._on_waited(status)

    def _on_waited(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)
        assert self._popen is not None
        self._popen.returncode = self.returncode  # keep Popen from reaping again
        self._output.read_buffered()
        self._exited.set()
        if self._state is ProcState.RUNNING:
            self._set_state(ProcState.EXITED)
            self._cleanup = asyncio.get_running_loop().create_task(self._after_crash())

    async def _after_crash(self) -> None:
        # The backend is gone; anything it left is an orphan holding ports or pipes.
        self._refresh_tree()
        await self._kill_tree()
        await self._finish()

    # ---- stopping ---------------------------------------------------------------------

    async def _stop(self, grace: float) -> int | None:
        if self._popen is None:
            if self._state is not ProcState.EXITED:
                self._set_state(ProcState.EXITED)
            return None
        if self._state is ProcState.RUNNING:
            self._set_state(ProcState.STOPPING)
        elif self._cleanup is not None:  # exited by itself; its cleanup is under way
            await self._cleanup
            return self.returncode
        self._signal_tree(signal.SIGTERM)
        if not await self._wait_tree_gone(grace):
            log.warning("%s did not stop within %.1fs; killing", self.name, grace)
        await self._kill_tree()
        await self._finish()
        return self.returncode

    def _refresh_tree(self) -> list[int]:
        """Record and return the live members of this backend's tree."""
        pid = self._require_pid()
        found: set[int] = set(wd.tagged_pids(self._tag))
        found.update(wd.group_members({pid}))
        try:
            found.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
        for p in found:
            st = wd.proc_stat(p)
            if st is not None and p not in self._seen:
                self._seen[p] = st.start_ticks
        return [p for p, ticks in self._seen.items() if wd.alive(p, ticks)]

    def _signal_tree(self, sig: int) -> None:
        live = self._refresh_tree()
        wd.killpg_quietly(self._require_pid(), sig)
        for p in live:
            wd.kill_quietly(p, sig)

    async def _wait_tree_gone(self, grace: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        try:
            await asyncio.wait_for(self._exited.wait(), grace)
        except TimeoutError:
            return False
        while self._refresh_tree():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def _kill_tree(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _KILL_WAIT
        while loop.time() < deadline:
            self._signal_tree(signal.SIGKILL)
            if not self._refresh_tree() and self._exited.is_set():
                return
            await asyncio.sleep(0.01)
        log.error("%s: processes survived SIGKILL for %.0fs", self.name, _KILL_WAIT)

    async def _finish(self) -> None:
        for p, ticks in self._seen.items():
            if p != self.pid:
                wd.reap_if_child(p, ticks)
        await self._output.drain(0.5)
        if self._pidfile is not None:
            self._pidfile.unlink(missing_ok=True)
        _watchdog.unregister(self._require_pid())
        if self._state is not ProcState.EXITED:
            self._set_state(ProcState.EXITED)


def hold_watchdog() -> None:
    """A long-lived owner of backends (the runtime manager) keeps the watchdog up."""
    _watchdog.hold()


def release_watchdog() -> None:
    _watchdog.release()


def reap_stale(pidfile_dir: Path) -> list[int]:
    """Kill survivors recorded by a previous router's pidfiles; see watchdog.reap_stale."""
    return wd.reap_stale(pidfile_dir, _watchdog.router_tag)
