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
a wrapper must not daemonize the real server.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import enum
import fcntl
import logging
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

from backends import watchdog as wd

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MAX_LINE = 16384  # longer lines are emitted (and kept) in pieces of this size
# Once serving (after `detach_output`), a pipe is left alone this long after each read so the
# child's next writes arrive as one read: llama-server writes each log line in several
# write()s, ~6 lines per request, and every read woke the router's event loop (~75 us per
# request in bench/RESULTS.md, issue 17). Before that, lines are read as they come: the
# readiness line and load progress must not wait. At 10 ms a 64 KiB pipe holds 6 MB/s of log
# (llama-server writes ~3 KB per request, ~30 lines); detached pipes are also enlarged to
# SERVING_PIPE_BYTES where the system allows, so a busy backend never waits on its log.
READ_COALESCE_S = 0.01
SERVING_PIPE_BYTES = 1 << 20
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
    lines longer than MAX_LINE arrive in pieces. Create, start and stop it on one event loop.
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
        self._on_output = on_output
        self._coalesce = False  # set by detach_output: the backend is serving
        # Raw lines, decoded only when read (tail): a serving llama-server writes ~30 lines
        # per request, and most are never read (bench/profile_proxy.py).
        self._ring: collections.deque[bytes] = collections.deque(maxlen=max(1, ring_lines))
        self._partial: dict[str, bytes] = {}
        self._streams: dict[str, IO[bytes]] = {}
        self._eof = asyncio.Event()
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
        self.last_output_at = 0.0

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

    def tail(self, n: int = 50) -> list[str]:
        """The last n output lines of both streams, in arrival order."""
        lines = list(self._ring)[-n:] if n > 0 else []
        return [line.decode("utf-8", errors="replace") for line in lines]

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
        self.last_output_at = time.monotonic()
        self._record_spawn()
        self._attach_streams(loop)
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

    # ---- output -----------------------------------------------------------------------

    def _attach_streams(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._popen is not None
        for name, fh in (("stdout", self._popen.stdout), ("stderr", self._popen.stderr)):
            assert fh is not None
            fd = fh.fileno()
            os.set_blocking(fd, False)
            self._streams[name] = fh
            self._partial[name] = b""
            loop.add_reader(fd, self._on_wake, loop, name, fd)

    def _on_wake(self, loop: asyncio.AbstractEventLoop, name: str, fd: int) -> None:
        if self._on_readable(name, fd) and self._coalesce and name in self._streams:
            loop.remove_reader(fd)
            loop.call_later(READ_COALESCE_S, self._rearm, loop, name, fd)

    def _rearm(self, loop: asyncio.AbstractEventLoop, name: str, fd: int) -> None:
        fh = self._streams.get(name)
        if fh is not None and not fh.closed and fh.fileno() == fd:
            loop.add_reader(fd, self._on_wake, loop, name, fd)

    def _on_readable(self, name: str, fd: int) -> bool:
        """Read one chunk; False when nothing was available."""
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._close_stream(name)
            return False
        self.last_output_at = time.monotonic()
        buf = self._partial[name] + data
        *lines, rest = buf.split(b"\n")
        while len(rest) > MAX_LINE:  # bound memory for output that never ends a line
            lines.append(rest[:MAX_LINE])
            rest = rest[MAX_LINE:]
        self._partial[name] = rest
        if self._on_output is None and len(buf) <= MAX_LINE and b"\r" not in buf:
            self._ring.extend(lines)  # detached, short lines: all the loop below would do
            return True
        for line in lines:
            line = line.rstrip(b"\r")
            if self._on_output is None and len(line) <= MAX_LINE:
                self._ring.append(line)  # detached (serving): all _emit would do
                continue
            for start in range(0, max(len(line), 1), MAX_LINE):
                self._emit(name, line[start : start + MAX_LINE])
        return True

    def _read_buffered(self) -> None:
        """Take what the child wrote before exiting, so tail() has its last words."""
        for name, fh in list(self._streams.items()):
            for _ in range(64):  # bounded: a grandchild may keep writing
                if not self._on_readable(name, fh.fileno()):
                    break

    def detach_output(self) -> None:
        """Stop calling `on_output`: its readers (readiness, load progress, the load capture)
        are done once the backend is up, and a serving backend logs lines per request, so its
        reads are coalesced from now on."""
        self._on_output = None
        self._coalesce = True
        for fh in self._streams.values():
            with contextlib.suppress(OSError, ValueError):  # above fs.pipe-max-size: kept
                fcntl.fcntl(fh.fileno(), fcntl.F_SETPIPE_SZ, SERVING_PIPE_BYTES)

    def _emit(self, name: str, line: bytes) -> None:
        self._ring.append(line)
        if self._on_output is not None:
            try:
                self._on_output(name, line)
            except Exception:  # a broken observer must not stop the reader
                log.exception("on_output callback failed for %s", self.name)

    def _close_stream(self, name: str) -> None:
        fh = self._streams.pop(name, None)
        if fh is None:
            return
        rest = self._partial.pop(name, b"")
        if rest:
            self._emit(name, rest.rstrip(b"\r"))
        try:
            asyncio.get_running_loop().remove_reader(fh.fileno())
        except (RuntimeError, ValueError):
            pass
        fh.close()
        if not self._streams:
            self._eof.set()

    async def _drain_streams(self, limit: float) -> None:
        """Wait for EOF briefly; then stop reading whatever a survivor still holds."""
        try:
            await asyncio.wait_for(self._eof.wait(), limit)
        except TimeoutError:
            for name in list(self._streams):
                self._close_stream(name)

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
        self._read_buffered()
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
        await self._drain_streams(0.5)
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
