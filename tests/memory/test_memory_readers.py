"""Only the memory package reads system memory (docs/residency.md, "Where memory is judged").

pyproject.toml's contract "Only the memory package reads system memory" lets psutil be
imported outside router/memory only by backends.process (process trees) and router.edge.guards
(network interfaces). A contract cannot see which psutil calls a module makes, nor a file read
or NVML loaded by name, so this scan of the source does: outside router/memory no module calls
`virtual_memory` or `swap_memory`, names /proc/meminfo, asks `sysconf` for memory pages, asks
NVML for memory or loads `pynvml`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEMORY = ROOT / "router" / "memory"
CALLS = {"virtual_memory", "swap_memory", "nvmlDeviceGetMemoryInfo"}
STRINGS = ("/proc/meminfo", "SC_PHYS_PAGES", "SC_AVPHYS_PAGES", "pynvml")


def memory_reads(source: str) -> list[str]:
    """Each place in `source` that reads system memory, as `line: what`, in line order
    (docstrings and other bare strings only talk about it)."""
    tree = ast.parse(source)
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = int(getattr(node, "lineno", 0))
        name = _name(node)
        if name in CALLS:
            found.append((line, name))
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            found += [(line, f"import {m}") for m in modules if m.startswith("pynvml")]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            found += [(line, repr(s)) for s in STRINGS if s in node.value]
    return [f"{line}: {what}" for line, what in sorted(found)]


def _name(node: ast.AST) -> str | None:
    """The name a node uses: `psutil.virtual_memory`, `virtual_memory`, `import ... as`."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.alias):
        return node.name.rpartition(".")[2]
    return None


def test_no_module_outside_the_memory_package_reads_system_memory() -> None:
    files = sorted((ROOT / "router").rglob("*.py")) + sorted((ROOT / "backends").rglob("*.py"))
    outside = [f for f in files if MEMORY not in f.parents]
    assert len(outside) > 200  # the scan saw the tree, not an empty folder
    found = {
        str(f.relative_to(ROOT)): reads
        for f in outside
        if (reads := memory_reads(f.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_memory_package_is_where_the_reads_are() -> None:
    """The scan finds what it looks for: the memory package's own reads."""
    devices = memory_reads((MEMORY / "devices.py").read_text(encoding="utf-8"))
    assert [r.split(": ", 1)[1] for r in devices] == [
        "'pynvml'",  # load_nvml
        "virtual_memory",  # host_device: the host's total
        "virtual_memory",  # host_available: what the kernel reports available now
        "nvmlDeviceGetMemoryInfo",  # a GPU's total
    ]


def test_each_kind_of_read_is_found() -> None:
    samples = {
        "import psutil\npsutil.virtual_memory().total": ["2: virtual_memory"],
        "from psutil import swap_memory": ["1: swap_memory"],
        "open('/proc/meminfo').read()": ["1: '/proc/meminfo'"],
        "import os\nos.sysconf('SC_PHYS_PAGES')": ["2: 'SC_PHYS_PAGES'"],
        "import pynvml": ["1: import pynvml"],
        "importlib.import_module('pynvml')": ["1: 'pynvml'"],
        "nvml.nvmlDeviceGetMemoryInfo(h).used": ["1: nvmlDeviceGetMemoryInfo"],
        "import psutil\npsutil.Process(1).children()": [],  # processes are no memory read
        '"""Reads /proc/meminfo."""\nx = 1': [],  # a docstring only talks about it
    }
    for source, expected in samples.items():
        assert memory_reads(source) == expected, source
