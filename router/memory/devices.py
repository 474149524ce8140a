"""The memory devices of this machine: the host (RAM, via psutil) and each GPU NVML reports.

With measure.py this is the only module that reads system memory (an import contract in
pyproject.toml and tests/memory/test_memory_readers.py hold it): the rest of the router asks
the memory package (the site inventory `host_device`, the read-ahead and the vLLM sleep
host.py's `HostRoom`).

NVML sits behind a seam (`load_nvml`): the PyPI package `nvidia-ml-py` provides the module
`pynvml`, and tests hand in a fake module with the same few functions. A machine without the
NVIDIA driver (or without the package) has the host alone; that is said once in the log, not on
every discovery.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import psutil

log = logging.getLogger(__name__)

HOST = "host"
_said_host_only = False


@dataclass(frozen=True)
class Device:
    """One place memory lives. `id` is `host` or `gpu<N>` (N is NVML's index)."""

    id: str
    kind: str  # "host" | "gpu"
    name: str
    total: int  # bytes
    index: int | None = None  # the NVML index of a GPU

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"


def gpu_id(index: int) -> str:
    return f"gpu{index}"


def load_nvml() -> ModuleType | None:
    """The real `pynvml` module, or None when the package is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def host_device() -> Device:
    return Device(HOST, "host", "host memory", int(psutil.virtual_memory().total))


def host_available() -> int:
    """Host memory the kernel reports available now (free plus what it can reclaim)."""
    return int(psutil.virtual_memory().available)


def discover(nvml_loader: Callable[[], ModuleType | Any | None] = load_nvml) -> tuple[Device, ...]:
    """The host first, then every GPU in NVML's order. Never raises for a missing driver."""
    return (host_device(), *gpu_devices(nvml_loader()))


def gpu_devices(nvml: ModuleType | Any | None) -> tuple[Device, ...]:
    global _said_host_only
    if nvml is None:
        reason = "the nvidia-ml-py package is not installed"
    else:
        try:
            nvml.nvmlInit()
            try:
                return tuple(_gpu(nvml, i) for i in range(int(nvml.nvmlDeviceGetCount())))
            finally:
                nvml.nvmlShutdown()
        except nvml.NVMLError as exc:  # no driver, no device, a driver/library mismatch
            reason = f"NVML is not available ({exc})"
    if not _said_host_only:
        _said_host_only = True
        log.info("memory ledger: host memory only: %s", reason)
    return ()


def _gpu(nvml: Any, index: int) -> Device:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = nvml.nvmlDeviceGetName(handle)
    name = name.decode() if isinstance(name, bytes) else str(name)
    total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    return Device(gpu_id(index), "gpu", name, total, index)


def gpu_process_bytes(nvml: Any, pids: set[int]) -> dict[str, int]:
    """GPU memory the given processes hold, per device (a measurement after a load).

    PIDs may not map inside a container (NVML reports the host's PIDs): then nothing matches
    and the caller keeps the estimate.
    """
    used: dict[str, int] = {}
    nvml.nvmlInit()
    try:
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                amount = getattr(proc, "usedGpuMemory", None)
                if proc.pid in pids and isinstance(amount, int):
                    used[gpu_id(index)] = used.get(gpu_id(index), 0) + amount
    finally:
        nvml.nvmlShutdown()
    return used


def budgets(
    devices: tuple[Device, ...],
    host_budget: int | str,
    gpu_budget: int | str,
    reserve: int,
) -> dict[str, int]:
    """Each device's budget from the `memory` settings: `auto` is its total minus `reserve`;
    a size is used as given (for GPUs: applied to each), never above the device's total."""
    out: dict[str, int] = {}
    for device in devices:
        chosen = gpu_budget if device.is_gpu else host_budget
        wanted = device.total - reserve if chosen == "auto" else int(chosen)
        out[device.id] = max(0, min(wanted, device.total))
    return out


__all__ = [
    "HOST",
    "Device",
    "budgets",
    "discover",
    "gpu_devices",
    "gpu_process_bytes",
    "host_available",
    "host_device",
]
