"""Measured memory after a load (router/runtime/measuring.py), through the real supervisor.

The fake backend prints no memory report, so a READY runtime is measured by its process tree's
resident memory; a load that fails for lack of memory records a raised figure; the store
download carries what was measured. The NVML path runs a real child under a fake `pynvml`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import Any

import psutil

from backends.process import SupervisedProcess
from router.appkeys import CATALOG, FIGURES, SETTINGS
from router.config import ModelConfig, parse_kcpps
from router.domain import BackendMode, Family, Lane
from router.memory.book import FigureBook
from router.memory.devices import Device, host_device
from router.memory.estimate import PROCESS_OVERHEAD
from router.memory.fingerprint import launch_fingerprint
from router.memory.measure import raised_figure
from router.memory.sizing import estimate_config
from router.memory.status import machine_devices
from router.runtime.loader import Launched
from router.runtime.measuring import Measuring
from router.runtime.state import Runtime, spec_for
from tests.fakes.wrappers import _write_script
from tests.memory.test_memory_devices import FakeNvml, _Proc
from tests.support.harness import RouterHarness, wait_for

MIB = 1 << 20
GIB = 1 << 30


def _measuring(h: RouterHarness) -> Measuring:
    assert h.app is not None
    return h.app[FIGURES]


def _catalog_config(h: RouterHarness, model_id: str) -> ModelConfig:
    assert h.app is not None
    found = h.app[CATALOG].resolve(model_id)
    assert found is not None
    return found


async def _hashed(h: RouterHarness, model_id: str) -> None:
    """The catalog hashes model files in the background and the hash is part of the
    fingerprint: wait for it, so the load and the test's lookup use the same one."""
    assert await wait_for(lambda: _catalog_config(h, model_id).asset_sha256, deadline=10)


def _fingerprint(h: RouterHarness, model_id: str) -> str:
    assert h.app is not None
    config = _catalog_config(h, model_id)
    settings = h.app[SETTINGS]
    return launch_fingerprint(config, Lane.TEXT, Family.LLAMACPP, settings, machine_devices())


async def test_a_ready_runtime_without_a_report_is_measured_by_its_process(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a", gpulayers=0)
    client = await harness.start()
    await _hashed(harness, "chat-a")
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    [pid] = harness.backend_pids()
    await _measuring(harness).settled()
    rss = psutil.Process(pid).memory_info().rss

    entry = _measuring(harness).book.entry("chat-a", _fingerprint(harness, "chat-a"))
    assert entry is not None, "no figure recorded under the launch's fingerprint"
    assert entry.method == "process" and not entry.measured.oom
    host = entry.measured.devices["host"]
    assert set(entry.measured.devices) == {"host"}
    assert rss / 2 <= host <= rss * 2, (host, rss)  # the tree's RSS right after the load
    assert entry.measured.load_seconds is not None and 0 < entry.measured.load_seconds < 20

    # The store download (the whole file) carries the figure.
    download = await client.get("/router/v1/site/store/download")
    assert download.status_code == 200
    copy = harness.tmp / "download.sqlite"
    copy.write_bytes(download.content)
    with sqlite3.connect(copy) as db:
        rows = db.execute("SELECT config_id, method, oom FROM memory_figures").fetchall()
    assert rows == [("chat-a", "process", 0)]

    # A restarted router knows the figure before any load: the next estimate is replaced.
    fingerprint = _fingerprint(harness, "chat-a")
    await harness.close()
    await harness.start()
    assert _measuring(harness).lookup("chat-a", fingerprint) == entry.measured


async def test_an_out_of_memory_load_records_a_raised_figure(harness: RouterHarness) -> None:
    harness.model("big", gpulayers=0)
    harness.programs["llamacpp"] = _write_script(
        harness.bin_dir / "oom-llama",
        'echo "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer'
        ' of size 68719476736" >&2\nexit 1',
    )
    client = await harness.start()
    await _hashed(harness, "big")
    failed = await client.post("/router/v1/load", json={"model": "big"})
    assert failed.status_code >= 500
    measuring = _measuring(harness)
    await measuring.settled()
    config = _catalog_config(harness, "big")
    fingerprint = _fingerprint(harness, "big")
    estimate = estimate_config(config, Lane.TEXT, Family.LLAMACPP, machine_devices())
    first = measuring.book.entry("big", fingerprint)
    assert first is not None and first.method == "raised" and first.measured.oom
    assert first.measured.devices == raised_figure(estimate.devices, None)
    assert first.measured.load_seconds is None

    assert (await client.post("/router/v1/load", json={"model": "big"})).status_code >= 500
    await measuring.settled()
    second = measuring.lookup("big", fingerprint)
    assert second is not None and second.total > first.measured.total  # raised again


async def test_a_failure_that_is_not_memory_records_nothing(harness: RouterHarness) -> None:
    harness.model("broken", gpulayers=0)
    harness.programs["llamacpp"] = _write_script(
        harness.bin_dir / "bad-llama", 'echo "error: invalid argument: --zz" >&2\nexit 1'
    )
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "broken"})).status_code >= 500
    measuring = _measuring(harness)
    await measuring.settled()
    assert measuring.book.latest("broken") is None


class _Book:
    def __init__(self) -> None:
        self.saved: list[dict[str, Any]] = []

    async def save(self, row: Any) -> None:
        self.saved.append(dict(row))

    async def rows(self) -> list[dict[str, Any]]:
        return []


async def test_nvml_per_process_use_is_the_gpu_figure(
    harness: RouterHarness, tmp_path: Path
) -> None:
    """A real child process; the fake NVML reports it (and a stranger) on gpu0 and gpu1."""
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    kcpps = tmp_path / "gpu.kcpps"
    data = b'{"model_param": "%s", "gpulayers": 99}' % str(tmp_path / "m.gguf").encode()
    config = parse_kcpps(kcpps, data, BackendMode.LLAMA_SDCPP)
    process = SupervisedProcess(
        [sys.executable, "-c", "import time; time.sleep(60)"], name="gpu-child"
    )
    await process.start()
    try:
        assert process.pid is not None
        fake = FakeNvml(
            [
                ("A", 24 * GIB, [_Proc(process.pid, 700 * MIB), _Proc(1, 5 * GIB)]),
                ("B", 12 * GIB, [_Proc(process.pid, None)]),  # no figure: not counted
            ]
        )
        devices = (host_device(), Device("gpu0", "gpu", "A", 24 * GIB, 0))
        rows = _Book()
        measuring = Measuring(
            FigureBook(rows), harness.settings(), devices=lambda: devices, nvml_loader=lambda: fake
        )
        runtime = Runtime(spec_for(config, Lane.TEXT))
        launched = Launched(process, 1, "http://127.0.0.1:1", "gpu", [], 2.5)
        measuring.loaded(runtime, launched, [])
        await measuring.settled()
        [row] = rows.saved
        assert row["method"] == "process" and row["load_seconds"] == 2.5
        assert row["devices"]["gpu0"] == 700 * MIB and "gpu1" not in row["devices"]
        rss = psutil.Process(process.pid).memory_info().rss
        assert rss / 2 <= row["devices"]["host"] <= rss * 2
        assert row["fingerprint"] == launch_fingerprint(
            config, Lane.TEXT, Family.LLAMACPP, harness.settings(), devices
        )
        assert fake.open == 0  # every nvmlInit paired with nvmlShutdown

        # With a report among the load's lines, the report wins and NVML is not asked.
        measuring.loaded(runtime, launched, REPORT_LINES)
        await measuring.settled()
        assert rows.saved[-1]["method"] == "report"
        assert rows.saved[-1]["devices"] == {
            "gpu0": 5800 * MIB,
            "host": 420 * MIB + PROCESS_OVERHEAD["llamacpp"],
        }
    finally:
        await asyncio.shield(process.stop(2.0))


REPORT_LINES = [
    "llama_memory_breakdown_print: | memory breakdown [MiB] | total    free     self   model   "
    "context   compute    unaccounted |",
    "llama_memory_breakdown_print: |   - CUDA0 (NVIDIA GeForce RTX 4090) | 24080 = 18000 + "
    "( 5800 =  4400 +     1024 +     376) +         280 |",
    "llama_memory_breakdown_print: |   - Host               |                  420 =   410 +"
    "       0 +      10                |",
]
