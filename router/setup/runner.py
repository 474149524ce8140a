"""Running one recipe step: a real subprocess in its own process group, output captured.

argv is handed to exec (never a shell). The step leads a new session, so a cancel or a
deadline stops it and everything it started (cmake's compilers, pip's build backend) with
TERM, then KILL after the grace. Anything the step left running after it exited is killed
too: a build leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable

from backends.recipes import ResolvedStep

OutputSink = Callable[[str, bytes], None]
READ_SIZE = 64 * 1024
_DRAIN_SECONDS = 5.0  # pipes still open after the group was killed: stop reading


class StepFailed(Exception):
    """A step exited non-zero, could not start, or passed its deadline."""


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def stop_group(process: asyncio.subprocess.Process, grace: float) -> None:
    """TERM the step's process group, KILL it after `grace`, and reap the leader."""
    _signal_group(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), grace)
    except TimeoutError:
        pass
    _signal_group(process.pid, signal.SIGKILL)
    await process.wait()


async def _pump(stream: asyncio.StreamReader | None, name: str, sink: OutputSink) -> None:
    if stream is None:
        return
    while chunk := await stream.read(READ_SIZE):
        sink(name, chunk)


async def run_step(step: ResolvedStep, sink: OutputSink, *, seconds: float, grace: float) -> None:
    """Run `step` to its end; StepFailed unless it exits 0 within `seconds`.
    Cancelling the caller stops the process group before the CancelledError goes on."""
    try:
        process = await asyncio.create_subprocess_exec(
            *step.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **step.env},
            cwd=step.cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise StepFailed(
            f"step {step.name} could not start {step.argv[0]!r}: {exc.strerror or exc}"
        ) from None
    readers = asyncio.gather(
        _pump(process.stdout, "stdout", sink), _pump(process.stderr, "stderr", sink)
    )
    try:
        code = await asyncio.wait_for(process.wait(), seconds)
    except TimeoutError:
        await stop_group(process, grace)
        raise StepFailed(
            f"step {step.name} ran longer than {seconds:.0f} s (setup.step_timeout)"
        ) from None
    except BaseException:
        await asyncio.shield(stop_group(process, grace))
        raise
    finally:
        _signal_group(process.pid, signal.SIGKILL)  # whatever the step left running
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(readers), _DRAIN_SECONDS)
        readers.cancel()
    if code != 0:
        raise StepFailed(f"step {step.name} exited {code}")
