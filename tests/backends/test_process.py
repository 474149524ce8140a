"""SupervisedProcess: lifecycle, output, stop escalation and orphan handling (R1-R4, R6)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from backends import output as output_mod
from backends import process as proc_mod
from backends import watchdog as wd
from backends.process import ProcState, ProcStateError, SupervisedProcess, reap_stale
from tests.fakes.wrappers import fake_argv, write_setsid_wrapper
from tests.support import proctree
from tests.support.signal_spy import spy_on_signals

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("clean_tree")]
PY = sys.executable


def py(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


async def wait_for_line(p: SupervisedProcess, pattern: str, limit: float = 10.0) -> re.Match[str]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for line in p.tail(400):
            if m := re.search(pattern, line):
                return m
        await asyncio.sleep(0.02)
    raise AssertionError(f"no line matching {pattern!r}; tail: {p.tail(20)}")


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---- state machine ---------------------------------------------------------------------


def test_transition_table() -> None:
    proc_mod.check_transition(ProcState.STARTING, ProcState.RUNNING)
    proc_mod.check_transition(ProcState.RUNNING, ProcState.STOPPING)
    proc_mod.check_transition(ProcState.RUNNING, ProcState.EXITED)
    proc_mod.check_transition(ProcState.STOPPING, ProcState.EXITED)
    for old, new in [
        (ProcState.EXITED, ProcState.RUNNING),
        (ProcState.STOPPING, ProcState.RUNNING),
        (ProcState.RUNNING, ProcState.STARTING),
        (ProcState.STARTING, ProcState.STOPPING),
    ]:
        with pytest.raises(ProcStateError):
            proc_mod.check_transition(old, new)


async def test_illegal_lifecycle_calls(tmp_path: Path) -> None:
    p = SupervisedProcess(py("import time; time.sleep(30)"), name="t", pidfile_dir=tmp_path)
    with pytest.raises(ProcStateError):
        await p.wait_exit()
    await p.start()
    assert p.state is ProcState.RUNNING
    with pytest.raises(ProcStateError):
        await p.start()
    assert await p.stop(2.0) == -signal.SIGTERM
    assert p.state is ProcState.EXITED
    with pytest.raises(ProcStateError):
        await p.start()


async def test_stop_before_start_and_missing_binary(tmp_path: Path) -> None:
    never = SupervisedProcess(["true"], name="never")
    assert await never.stop(1.0) is None
    assert never.state is ProcState.EXITED
    missing = SupervisedProcess([str(tmp_path / "no-such-binary")], name="missing")
    with pytest.raises(FileNotFoundError):
        await missing.start()
    assert missing.state is ProcState.EXITED


# ---- output ----------------------------------------------------------------------------


async def test_output_lines_invalid_utf8_and_callback() -> None:
    seen: list[tuple[str, bytes]] = []
    code = """
        import sys
        sys.stdout.buffer.write(b"ok \\xff\\xfe bad\\r\\n"); sys.stdout.flush()
        sys.stderr.buffer.write(b"err line\\nno newline at end")
    """
    p = SupervisedProcess(py(code), name="utf8", on_output=lambda s, b: seen.append((s, b)))
    await p.start()
    assert await p.wait_exit() == 0
    await p.stop(1.0)
    assert ("stdout", b"ok \xff\xfe bad") in seen
    assert ("stderr", b"err line") in seen
    assert ("stderr", b"no newline at end") in seen
    assert "ok \ufffd\ufffd bad" in p.tail(10)
    assert p.last_output_at > 0


async def test_ring_is_bounded_and_long_lines_are_split() -> None:
    code = """
        import sys
        for i in range(1000):
            print(f"line {i}")
        sys.stdout.write("x" * 40000 + "\\n")
    """
    p = SupervisedProcess(py(code), name="ring", ring_lines=50)
    await p.start()
    await p.wait_exit()
    await p.stop(1.0)
    tail = p.tail(1000)
    assert len(tail) == 50
    assert tail[-4] == "line 999"
    piece = output_mod.MAX_LINE
    assert [len(x) for x in tail[-3:]] == [piece] * 2 + [40000 - 2 * piece]
    assert p.tail(0) == []


async def test_callback_errors_do_not_stop_reading() -> None:
    def broken(_stream: str, _line: bytes) -> None:
        raise RuntimeError("observer bug")

    p = SupervisedProcess(py("print('a'); print('b')"), name="cb", on_output=broken)
    await p.start()
    await p.wait_exit()
    await p.stop(1.0)
    assert p.tail(2) == ["a", "b"]


async def test_a_serving_backends_output_is_detached_and_read_coalesced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Long enough that x2 and x3 (written 0.1 s and 0.2 s after x1) come in one read.
    monkeypatch.setattr(output_mod, "READ_COALESCE_S", 0.6)
    seen: list[bytes] = []
    code = """
        import sys, time
        print("ready", flush=True)
        time.sleep(0.5)
        for name in ("x1", "x2", "x3"):
            print(name, flush=True)
            time.sleep(0.1)
        time.sleep(1.0)
    """
    p = SupervisedProcess(py(code), name="detach", on_output=lambda s, b: seen.append(b))
    await p.start()
    await wait_for_line(p, "^ready$")
    assert seen == [b"ready"]  # read at once while loading: no coalescing before detach
    p.detach_output()
    reads: list[bool] = []
    read_one = p._output._on_readable

    def counted(name: str, fd: int) -> bool:
        got = read_one(name, fd)
        reads.append(got)
        return got

    monkeypatch.setattr(p._output, "_on_readable", counted)
    try:
        await wait_for_line(p, "^x3$")
        assert seen == [b"ready"]  # nothing reaches the load's readers any more
        assert p.tail(3) == ["x1", "x2", "x3"]  # the ring still keeps the last words
        assert reads.count(True) == 2, reads  # x1, then x2 and x3 together
    finally:
        await p.stop(1.0)


# ---- exit detection (R6, R2) -------------------------------------------------------------


async def test_exit_at_start_is_detected_at_once() -> None:
    argv = fake_argv("llamacpp", "-m", "x.gguf", "--port", "0", "--exit-at-start", "3")
    p = SupervisedProcess(argv, name="r6")
    await p.start()
    # The test watches the exit itself through its own pidfd, on the same event loop: the
    # supervisor must see it at the same event, not at a poll or a timeout. (Measured from
    # the last output line instead, the bound also counted the child's own interpreter
    # shutdown after that line, which a loaded machine stretches past 100 ms.)
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[float] = loop.create_future()
    assert p.pid is not None
    try:
        watch = os.pidfd_open(p.pid)
    except ProcessLookupError:
        watch = None  # gone and reaped already: the supervisor saw the exit before we looked
    if watch is not None:
        loop.add_reader(watch, lambda: exited.done() or exited.set_result(time.monotonic()))
    try:
        code = await asyncio.wait_for(p.wait_exit(), 10)
        detected = time.monotonic()
        if watch is not None:
            seen = await asyncio.wait_for(exited, 10)
            assert detected - seen < 0.1, f"seen {detected - seen:.3f}s after the exit"
    finally:
        if watch is not None:
            loop.remove_reader(watch)
            os.close(watch)
    assert code == 3
    assert any("exiting due to model loading error" in line for line in p.tail(10))
    assert p.state is ProcState.EXITED
    assert await p.stop(1.0) == 3


async def test_exit_seen_while_a_grandchild_holds_the_pipes() -> None:
    # The wrapper exits at once; its background child keeps stdout open (cpython#119710).
    p = SupervisedProcess(["bash", "-c", "sleep 30 & echo started; exit 5"], name="holder")
    await p.start()
    assert await asyncio.wait_for(p.wait_exit(), 2.0) == 5
    assert await asyncio.wait_for(p.stop(1.0), 3.0) == 5  # its orphan is killed and reaped
    assert "started" in p.tail(5)


async def test_exit_detection_without_pidfd(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfd(_pid: int) -> int:
        raise OSError("pidfd_open unavailable")

    monkeypatch.setattr(proc_mod, "_pidfd_open", no_pidfd)
    p = SupervisedProcess(py("import sys; sys.exit(7)"), name="nopidfd")
    await p.start()
    assert await asyncio.wait_for(p.wait_exit(), 5.0) == 7
    await p.stop(1.0)


# ---- stop (R1, R2, R3) -------------------------------------------------------------------


async def test_r1_ignore_sigterm_is_killed_at_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    signals = spy_on_signals(monkeypatch)
    argv = fake_argv("llamacpp", "-m", "r1.gguf", "--port", "0", "--ignore-sigterm")
    p = SupervisedProcess(argv, name="r1")
    await p.start()
    await wait_for_line(p, r"fake backend llamacpp pid")
    code = await p.stop(1.0)
    assert code == -signal.SIGKILL
    assert not running(p.pid or 0)  # stop() returned once the process was gone
    # The matrix's ±100 ms, on the router's own signals (tests/support/signal_spy.py).
    gap = signals.term_to_kill()
    assert gap is not None and 0.99 <= gap <= 1.1, signals.sent


async def test_r1_slow_sigterm_is_not_killed_early() -> None:
    argv = fake_argv("vllm", "serve", "m", "--port", "0", "--sigterm-delay", "1.5")
    p = SupervisedProcess(argv, name="r1b")
    await p.start()
    await wait_for_line(p, r"fake backend vllm pid")
    t0 = time.monotonic()
    code = await p.stop(3.0)
    elapsed = time.monotonic() - t0
    assert code == 0  # exited by itself, not SIGKILLed
    # It waited for the exit (1.5 s after SIGTERM), and returned at it, not at the grace.
    assert 1.45 <= elapsed < 3.0, elapsed


async def test_r2_fork_wrapper_stop_is_bounded() -> None:
    argv = fake_argv(
        "llamacpp", "-m", "r2.gguf", "--port", "0", "--fork-wrapper", "--ignore-sigterm"
    )
    p = SupervisedProcess(argv, name="r2")
    await p.start()
    server = int((await wait_for_line(p, r"fake backend llamacpp pid (\d+)"))[1])
    assert server != p.pid and running(server)
    t0 = time.monotonic()
    stopping = asyncio.create_task(p.stop(1.5))
    # bash dies of SIGTERM at once; the server ignores it and still holds stdout.
    await asyncio.wait_for(p.wait_exit(), 1.0)
    assert running(server)
    await stopping
    assert time.monotonic() - t0 <= 1.5 + 1.0
    assert not running(server)


async def test_r3_setsid_child_is_terminated() -> None:
    argv = fake_argv("whisper", "-m", "r3.bin", "--port", "0", "--setsid-child")
    p = SupervisedProcess(argv, name="r3")
    await p.start()
    server = int((await wait_for_line(p, r"fake backend whisper pid (\d+)"))[1])
    assert os.getpgid(server) != p.pid
    t0 = time.monotonic()
    await p.stop(3.0)
    assert time.monotonic() - t0 < 2.0  # it got SIGTERM too, not only the final SIGKILL
    assert not running(server)


async def test_r3_setsid_wrapper_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    inner = fake_argv("sdcpp", "-m", "r3.safetensors", "--listen-port", "0", "--ignore-sigterm")
    wrapper = write_setsid_wrapper(tmp_path, inner)
    p = SupervisedProcess([str(wrapper)], name="r3b")
    await p.start()
    server = int((await wait_for_line(p, r"fake backend sdcpp pid (\d+)"))[1])
    await p.stop(0.5)
    assert not running(server)


async def test_concurrent_stops_share_one_result() -> None:
    p = SupervisedProcess(py("import time; time.sleep(30)"), name="conc")
    await p.start()
    a, b = await asyncio.gather(p.stop(2.0), p.stop(0.1))
    assert a == b == -signal.SIGTERM
    assert await p.stop(5.0) == a


# ---- pidfiles, watchdog and stale processes (R4) ------------------------------------------


async def test_pidfile_lifecycle(tmp_path: Path) -> None:
    p = SupervisedProcess(py("import time; time.sleep(30)"), name="pf", pidfile_dir=tmp_path)
    await p.start()
    rec = wd.PidRecord.read(tmp_path / "pf.pid")
    st = wd.proc_stat(rec.pid)
    assert st is not None and rec.pid == p.pid and rec.pgid == p.pid
    assert rec.start_ticks == st.start_ticks and rec.boot_id == wd.boot_id()
    assert wd.proc_tag(rec.pid) == rec.tag
    assert reap_stale(tmp_path) == []  # our own live record is left alone
    assert (tmp_path / "pf.pid").exists()
    await p.stop(2.0)
    assert not (tmp_path / "pf.pid").exists()


def test_reap_stale_kills_survivor_but_not_recycled_pid(tmp_path: Path) -> None:
    tag = "deadrouter-1.0123456789abcdef"
    sleeper = [PY, "-c", "import time; time.sleep(30)"]
    survivor = subprocess.Popen(
        sleeper, env={**os.environ, wd.TAG_VAR: tag}, start_new_session=True
    )
    bystander = subprocess.Popen(sleeper, start_new_session=True)
    try:
        for name, child, ticks_delta in (("a", survivor, 0), ("b", bystander, 1)):
            st = wd.proc_stat(child.pid)
            assert st is not None
            rec_tag = tag if name == "a" else "deadrouter-1.fedcba9876543210"
            wd.PidRecord(
                child.pid, child.pid, st.start_ticks + ticks_delta, wd.boot_id(), rec_tag
            ).write(tmp_path / f"{name}.pid")
        # b's tag does not match its environment and its start time is wrong: a recycled pid.
        (tmp_path / "junk.pid").write_text("not json")
        killed = reap_stale(tmp_path)
        assert killed == [survivor.pid]
        # reap_stale reaps what it killed when it is the parent (orphans re-parented to a
        # subreaper router), so check only that the survivor is gone.
        assert not running(survivor.pid)
        assert running(bystander.pid)
        assert list(tmp_path.iterdir()) == []
    finally:
        bystander.kill()
        bystander.wait()
        survivor.kill()
        survivor.wait()


ROUTER_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from backends.process import SupervisedProcess

async def main() -> None:
    argvs, pidfiles = json.loads(sys.argv[1]), Path(sys.argv[2])
    for i, argv in enumerate(argvs):
        await SupervisedProcess(argv, name=f"b{i}", pidfile_dir=pidfiles).start()
    print("STARTED", flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def test_r4_killed_router_leaves_nothing(tmp_path: Path) -> None:
    argvs = [
        fake_argv("llamacpp", "-m", "a.gguf", "--port", "0"),
        fake_argv("llamacpp", "-m", "b.gguf", "--port", "0", "--fork-wrapper"),
        fake_argv("vllm", "serve", "c", "--port", "0", "--setsid-child", "--ignore-sigterm"),
    ]
    pidfiles = tmp_path / "run"
    router = subprocess.Popen(
        [PY, "-c", ROUTER_SCRIPT, json.dumps(argvs), str(pidfiles)], stdout=subprocess.PIPE
    )
    assert router.stdout is not None and router.stdout.readline() == b"STARTED\n"
    # 3 backends + a bash wrapper's server + a setsid'd server + the watchdog.
    deadline = time.monotonic() + 15
    tree: list[psutil.Process] = []
    while len(tree) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
        tree = psutil.Process(router.pid).children(recursive=True)
    assert len(tree) == 6, [p.cmdline() for p in tree]
    assert len(list(pidfiles.glob("*.pid"))) == 3
    os.kill(router.pid, signal.SIGKILL)
    router.wait()
    t0 = time.monotonic()
    while any(running(p.pid) for p in tree) and time.monotonic() - t0 < 2.0:
        time.sleep(0.02)
    assert not [p.pid for p in tree if running(p.pid)]
    time.sleep(0.1)
    proctree.reap_zombie_children()  # orphans re-parented to this (subreaper) test process
    assert reap_stale(pidfiles) == []  # nothing survived, the files are cleared
    assert list(pidfiles.glob("*.pid")) == []
