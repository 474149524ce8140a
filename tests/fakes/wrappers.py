"""Helpers that build argv lists and executable wrapper scripts around the fake backend.

The router's adapters launch `binary_path` with each family's real flags, so a test points
`binary_path` at a script from write_fake_binary(); the script execs the fake backend with
the family fixed and passes the real flags through. Fault switches go in FAKE_BACKEND
(baked into the script or set in the environment). The forking and setsid wrappers wrap any
argv to reproduce R2 (wrapper whose background child inherits stdout) and R3 (a child that
left the process group). The chatty wrapper prints from its first instant, as a native backend
does while it starts.
"""

from __future__ import annotations

import shlex
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

FAKE_BACKEND = Path(__file__).with_name("fake_backend.py")


def fake_argv(family: str, *args: str) -> list[str]:
    """argv that runs the fake backend directly with this interpreter."""
    return [sys.executable, str(FAKE_BACKEND), "--family", family, *args]


def _write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def write_fake_binary(
    directory: Path, family: str, *, name: str | None = None, switches: str = ""
) -> Path:
    """An executable usable as a family's binary_path; `switches` are extra fake flags.

    Switches given here come before FAKE_BACKEND's, so the environment can still add more.
    """
    argv = " ".join(shlex.quote(a) for a in fake_argv(family, *shlex.split(switches)))
    return _write_script(directory / (name or f"fake-{family}"), f'exec {argv} "$@"')


def write_forking_wrapper(directory: Path, argv: Sequence[str], name: str = "fork-wrap") -> Path:
    """Runs argv as a background child that inherits stdout, then waits for it (R2)."""
    cmd = " ".join(shlex.quote(a) for a in argv)
    return _write_script(directory / name, f"{cmd} &\nwait $!")


def write_setsid_wrapper(directory: Path, argv: Sequence[str], name: str = "setsid-wrap") -> Path:
    """Runs argv in a new session (out of the wrapper's process group) and waits (R3)."""
    cmd = " ".join(shlex.quote(a) for a in argv)
    return _write_script(directory / name, f"setsid {cmd} &\nwait $!")


def write_chatty_wrapper(
    directory: Path, argv: Sequence[str], every: float, name: str = "chatty-wrap"
) -> Path:
    """Execs argv after starting a loop that prints a log line every `every` s until it exits.

    A native backend logs from its first milliseconds; the fake backend is silent while its
    interpreter starts and imports aiohttp, which takes seconds on a busy machine. A test of
    what output does to a load (R8) puts this in front so that silence is not part of it.
    """
    cmd = " ".join(shlex.quote(a) for a in argv)
    loop = (
        f'while kill -0 $$ 2>/dev/null; do echo "chatty-wrap: starting" >&2; sleep {every:g}; done'
    )
    return _write_script(directory / name, f'{loop} &\nexec {cmd} "$@"')
