"""Device discovery at the NVML seam: a fake `pynvml` module stands in for the driver."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from router.memory import devices as devices_mod
from router.memory.devices import Device, budgets, discover, gpu_process_bytes

GIB = 1 << 30


class FakeNvmlError(Exception):
    pass


@dataclass
class _Proc:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - NVML's own field name


class FakeNvml:
    """The few pynvml calls the ledger makes, over a list of (name, total, processes)."""

    NVMLError = FakeNvmlError

    def __init__(self, gpus: list[tuple[str, int, list[_Proc]]], *, broken: bool = False):
        self.gpus, self.broken, self.open = gpus, broken, 0

    def nvmlInit(self) -> None:  # noqa: N802
        if self.broken:
            raise FakeNvmlError("NVML Shared Library Not Found")
        self.open += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.open -= 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:  # noqa: N802
        return self.gpus[h][0].encode()

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:  # noqa: N802
        return SimpleNamespace(total=self.gpus[h][1], free=self.gpus[h][1], used=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[_Proc]:  # noqa: N802
        return self.gpus[h][2]


@pytest.fixture(autouse=True)
def _fresh_log_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices_mod, "_said_host_only", False)


def test_gpus_follow_the_host_in_nvml_order() -> None:
    fake = FakeNvml([("RTX A", 24 * GIB, []), ("RTX B", 12 * GIB, [])])
    found = discover(lambda: fake)
    assert [d.id for d in found] == ["host", "gpu0", "gpu1"]
    assert found[0].total == psutil.virtual_memory().total
    assert (found[1].name, found[1].total, found[2].index) == ("RTX A", 24 * GIB, 1)
    assert fake.open == 0  # every nvmlInit was paired with nvmlShutdown


def test_no_driver_means_host_only_said_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="router.memory.devices")
    broken = FakeNvml([], broken=True)
    for _ in range(3):
        assert [d.id for d in discover(lambda: broken)] == ["host"]
    assert [d.id for d in discover(lambda: None)] == ["host"]
    said = [r.getMessage() for r in caplog.records if "host memory only" in r.getMessage()]
    assert len(said) == 1 and "Shared Library Not Found" in said[0]


def test_the_real_module_never_raises() -> None:
    found = discover()  # the real pynvml: NVMLError without a driver becomes "host only"
    assert found[0].id == "host"
    if not Path("/dev/nvidiactl").exists():
        assert len(found) == 1


def test_per_process_gpu_use_sums_our_pids_per_device() -> None:
    fake = FakeNvml(
        [
            ("A", 24 * GIB, [_Proc(10, 3 * GIB), _Proc(99, 5 * GIB), _Proc(11, None)]),
            ("B", 24 * GIB, [_Proc(11, 1 * GIB)]),
        ]
    )
    assert gpu_process_bytes(fake, {10, 11}) == {"gpu0": 3 * GIB, "gpu1": 1 * GIB}


def test_budgets_auto_and_sizes_on_several_devices() -> None:
    devs = (
        Device("host", "host", "host", 64 * GIB),
        Device("gpu0", "gpu", "A", 24 * GIB, 0),
        Device("gpu1", "gpu", "B", 8 * GIB, 1),
    )
    assert budgets(devs, "auto", "auto", GIB) == {
        "host": 63 * GIB,
        "gpu0": 23 * GIB,
        "gpu1": 7 * GIB,
    }
    # A size applies to each GPU, capped at what the device has.
    assert budgets(devs, 600 << 20, 10 * GIB, GIB) == {
        "host": 600 << 20,
        "gpu0": 10 * GIB,
        "gpu1": 8 * GIB,
    }
    assert budgets(devs[:1], "auto", "auto", 100 * GIB) == {"host": 0}
