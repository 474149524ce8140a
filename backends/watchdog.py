"""Death-pipe watchdog: kills a dead router's backends, grandchildren included (R4).

Why a separate process: PR_SET_PDEATHSIG only reaches the router's *direct* children. A
backend started through a wrapper, or one that forks workers or calls setsid(), leaves
grandchildren that the kernel would simply re-parent when the router is killed with -9.

Design: one watchdog per router process, started by `backends.process` with the first
backend and told to exit after the last one stops. It runs in its own session (a Ctrl-C
aimed at the router's terminal must not kill it first) and reads the router's commands
on stdin, one per line:

    add PID PGID START_TICKS     a backend was spawned (START_TICKS: /proc starttime)
    del PID                      it was stopped and reaped
    bye                          clean shutdown, nothing left to kill

End-of-file without `bye` means the router died (the kernel closes its write end), and a
changed getppid() is a backup signal. Then the watchdog SIGKILLs, in a few rounds until
nothing is left: every process whose environment carries the router's tag
(`TENSOR_ROUTER_TAG=<router-tag>.<child>`; inherited through wrappers and setsid), every
member of a recorded process group, and every recorded pid whose start time still matches
(so a recycled pid is never hit). A descendant that both left the process group and
scrubbed its environment escapes; that is the documented limit.

This file is stdlib-only (so the watchdog interpreter starts with `-I -S` in a few
milliseconds) and also holds what `backends.process` shares with it: the /proc helpers,
the pidfile record and `reap_stale`, the next router's sweep for a dead one's survivors.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

TAG_VAR = "TENSOR_ROUTER_TAG"
_KILL_ROUNDS = 20


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the supervisor needs."""

    pid: int
    state: str
    ppid: int
    pgid: int
    start_ticks: int


def proc_stat(pid: int) -> ProcStat | None:
    """Parse /proc/<pid>/stat; None when the process does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # comm is in parentheses and may itself contain spaces or parentheses.
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return ProcStat(pid, rest[0], int(rest[1]), int(rest[2]), int(rest[19]))
    except (IndexError, ValueError):
        return None


def proc_tag(pid: int) -> str | None:
    """The value of TAG_VAR in the process environment, if readable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return None
    prefix = TAG_VAR.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode("ascii", "replace")
    return None


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def tagged_pids(tag_prefix: str) -> list[int]:
    """Live (non-zombie) processes whose tag starts with tag_prefix, except ourselves."""
    me = os.getpid()
    found = []
    for pid in all_pids():
        if pid == me:
            continue
        tag = proc_tag(pid)
        if tag is not None and tag.startswith(tag_prefix):
            found.append(pid)
    return found


def group_members(pgids: set[int]) -> list[int]:
    """Live processes in any of the given process groups."""
    found = []
    for pid in all_pids():
        st = proc_stat(pid)
        if st is not None and st.pgid in pgids and st.state != "Z":
            found.append(pid)
    return found


def kill_quietly(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def killpg_quietly(pgid: int, sig: int) -> bool:
    if pgid <= 1:
        return False
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@dataclass
class Record:
    pid: int
    pgid: int
    start_ticks: int


def _victims(tag_prefix: str, records: dict[int, Record]) -> set[int]:
    victims = set(tagged_pids(tag_prefix))
    victims.update(group_members({r.pgid for r in records.values()}))
    for rec in records.values():
        st = proc_stat(rec.pid)
        if st is not None and st.start_ticks == rec.start_ticks and st.state != "Z":
            victims.add(rec.pid)
    victims.discard(os.getpid())
    return victims


def kill_everything(tag_prefix: str, records: dict[int, Record]) -> int:
    """SIGKILL all that belongs to the dead router; repeat while forks race us."""
    killed = 0
    for _ in range(_KILL_ROUNDS):
        for rec in records.values():
            killpg_quietly(rec.pgid, signal.SIGKILL)
        victims = _victims(tag_prefix, records)
        if not victims:
            break
        for pid in victims:
            killed += kill_quietly(pid, signal.SIGKILL)
        time.sleep(0.02)
    return killed


def _apply(line: str, records: dict[int, Record]) -> bool:
    """Apply one command; return True on `bye`."""
    parts = line.split()
    if not parts:
        return False
    if parts[0] == "bye":
        return True
    try:
        if parts[0] == "add" and len(parts) == 4:
            pid, pgid, ticks = (int(p) for p in parts[1:])
            records[pid] = Record(pid, pgid, ticks)
        elif parts[0] == "del" and len(parts) == 2:
            records.pop(int(parts[1]), None)
    except ValueError:
        pass  # a garbled line must not take the watchdog down
    return False


def watch(router_tag: str, fd: int = 0) -> int:
    """Serve commands until `bye` (return 0) or the router's death (kill, return 0)."""
    router_pid = os.getppid()
    records: dict[int, Record] = {}
    buf = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            if os.getppid() != router_pid:
                break
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            if _apply(raw.decode("ascii", "replace"), records):
                return 0
    kill_everything(router_tag + ".", records)
    return 0


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class PidRecord:
    """What a pidfile holds."""

    pid: int
    pgid: int
    start_ticks: int
    boot_id: str
    tag: str

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> PidRecord:
        data = json.loads(path.read_text())
        return cls(
            int(data["pid"]),
            int(data["pgid"]),
            int(data["start_ticks"]),
            str(data["boot_id"]),
            str(data["tag"]),
        )


def alive(pid: int, start_ticks: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st.start_ticks == start_ticks and st.state != "Z"


def reap_if_child(pid: int, start_ticks: int) -> None:
    """Reap an orphan that the subreaper setting made our child."""
    st = proc_stat(pid)
    if st is None or st.start_ticks != start_ticks or st.ppid != os.getpid():
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def reap_stale(pidfile_dir: Path, own_router_tag: str = "") -> list[int]:
    """Kill what a previous router left (per its pidfiles) and remove the files.

    Call it before starting any backend. A record is trusted only on the same boot, and a
    pid only if its start time still matches, so a recycled pid is never killed. Blocking
    (bounded by about a second); run it in a thread if the loop is already serving.
    """
    killed: list[int] = []
    if not pidfile_dir.is_dir():
        return killed
    boot = boot_id()
    for path in sorted(pidfile_dir.glob("*.pid")):
        try:
            rec = PidRecord.read(path)
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if own_router_tag and rec.tag.startswith(own_router_tag + "."):
            continue  # ours, alive and supervised
        if rec.boot_id == boot:
            killed.extend(_kill_stale(rec))
        path.unlink(missing_ok=True)
    return killed


def _kill_stale(rec: PidRecord) -> list[int]:
    killed: list[int] = []
    for _ in range(50):
        victims = set(tagged_pids(rec.tag))
        if alive(rec.pid, rec.start_ticks):
            victims.add(rec.pid)
        if victims:  # the group is ours only while one of its members provably is
            victims.update(group_members({rec.pgid}))
        victims.discard(os.getpid())
        if not victims:
            break
        for p in victims:
            if kill_quietly(p, signal.SIGKILL) and p not in killed:
                killed.append(p)
        time.sleep(0.02)
    for p in killed:
        st = proc_stat(p)
        if st is not None:
            reap_if_child(p, st.start_ticks)
    return killed


class WatchdogClient:
    """Router side: starts the watchdog with the first backend (or `hold()`), stops it after
    the last one when nothing holds it.

    Lines go through a kernel pipe, so register() never waits for the watchdog to boot.
    The write end is non-inheritable (PEP 446) and Popen closes other fds, so no backend
    can keep the pipe open after the router dies.
    """

    def __init__(self) -> None:
        self.router_tag = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._owner = os.getpid()
        self._proc: subprocess.Popen[bytes] | None = None
        self._records: dict[int, Record] = {}
        self._lock = threading.Lock()
        self._held = 0

    def register(self, pid: int, pgid: int, start_ticks: int) -> None:
        with self._lock:
            self._records[pid] = Record(pid, pgid, start_ticks)
            self._send(f"add {pid} {pgid} {start_ticks}\n")

    def hold(self) -> None:
        """Keep the watchdog running between backends (a router that swaps models would
        otherwise start a fresh interpreter on its cold-start path for every load)."""
        with self._lock:
            self._held += 1
            if self._proc is None or self._proc.poll() is not None:
                self._spawn()

    def release(self) -> None:
        with self._lock:
            self._held = max(0, self._held - 1)
            if not self._held and not self._records:
                self._close()

    def unregister(self, pid: int) -> None:
        with self._lock:
            if self._records.pop(pid, None) is None:
                return
            self._send(f"del {pid}\n")
            if not self._records and not self._held:
                self._close()

    def _send(self, line: str) -> None:
        for _attempt in range(2):
            if self._proc is None or self._proc.poll() is not None:
                self._spawn()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write(line.encode())
                self._proc.stdin.flush()
                return
            except (BrokenPipeError, OSError):
                self._proc = None  # it died; a fresh one gets the full list

    def _spawn(self) -> None:
        if self._owner != os.getpid():
            raise RuntimeError("WatchdogClient used across fork()")
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), self.router_tag],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self._proc.stdin is not None
        for rec in self._records.values():
            self._proc.stdin.write(f"add {rec.pid} {rec.pgid} {rec.start_ticks}\n".encode())
        self._proc.stdin.flush()

    def _close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(b"bye\n")
            proc.stdin.close()
        except OSError:
            pass
        # Reap it off the event loop; it exits as soon as it reads `bye`.
        threading.Thread(target=proc.wait, name="watchdog-reaper", daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: watchdog.py ROUTER_TAG", file=sys.stderr)
        return 2
    # Terminal signals aimed at the router's group must not stop the cleanup.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return watch(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
