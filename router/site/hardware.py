"""This node's hardware for the site inventory's `hardware` field (docs/site.md).

Read once per process (it does not change while the router runs) from the OS: CPU count and
model, and the accelerators the kernel exposes (NVIDIA and AMD device nodes, DRM render nodes);
the memory from the memory package (router/memory/devices.py), the only reader of system
memory. Nothing is probed by running a program.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path
from typing import Any

from router.memory.devices import host_device


@functools.cache
def hardware() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count() or 1,
        "cpu_model": _cpu_model(),
        "architecture": platform.machine() or None,
        "memory_bytes": host_device().total,
        "accelerators": _accelerators(),
    }


def _cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor() or None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Hardware", "cpu model") and value.strip():
            return value.strip()
    return platform.processor() or None


def _accelerators() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    nvidia = sorted(Path("/dev").glob("nvidia[0-9]*"))
    found += [{"kind": "nvidia", "device": str(p)} for p in nvidia]
    if Path("/dev/kfd").exists():
        found.append({"kind": "amd", "device": "/dev/kfd"})
    render = sorted(Path("/dev/dri").glob("renderD*")) if Path("/dev/dri").is_dir() else []
    found += [{"kind": "drm", "device": str(p)} for p in render]
    return found
