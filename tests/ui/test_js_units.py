"""W17: the pure ES modules behind the data pages (ANSI parsing, timeline geometry, download
job rules) under `node --test`, which ships with Node (nothing to install). The files are
tests/ui/*.test.mjs; each imports the module it tests from router/ui/ as the browser does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
UNITS = sorted(HERE.glob("*.test.mjs"))


def test_node_unit_tests_pass() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: the JS unit tests need Node 18+ (the CI image has Node 20)")
    assert UNITS, "no *.test.mjs files found"
    done = subprocess.run(
        [node, "--test", *map(str, UNITS)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    expected = sum(p.read_text().count("test(") for p in UNITS)
    assert f"# pass {expected}" in done.stdout, done.stdout[-800:]
