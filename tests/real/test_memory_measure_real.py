"""Measured memory against the real llama-server (issue 25): the router launches it with
`-lv 4`, reads its memory breakdown from the load's output, and keeps `self` plus the process
overhead as the configuration's figure; the estimate of a configuration never loaded, whose
model and settings match the measured one, is within 2x of that measurement."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from router.appkeys import CATALOG, FIGURES, SETTINGS
from router.demo_models import write_kcpps
from router.domain import Family, Lane
from router.memory.fingerprint import launch_fingerprint
from router.memory.sizing import estimate_config
from router.memory.status import machine_devices
from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness, wait_for

pytestmark = [pytest.mark.real, pytest.mark.timeout(90)]


async def test_a_load_is_measured_from_llama_servers_report(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    write_demo_text_kcpps(h, demo_text)
    # Same model and settings, another id: never loaded.
    write_kcpps(h.kcpps_dir / "chat-twin.kcpps", model_param=demo_text["chat-a"])
    client = await h.start()
    assert h.app is not None
    catalog, settings, measuring = h.app[CATALOG], h.app[SETTINGS], h.app[FIGURES]
    # The model file's hash is part of the fingerprint: let the catalog finish hashing.
    assert await wait_for(lambda: (c := catalog.resolve("chat-a")) and c.asset_sha256, 20)

    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    [runtime] = h.runtimes.runtimes()
    argv = runtime.argv
    assert argv[argv.index("-lv") + 1] == "4" and argv.index("-lv") < argv.index("-t")
    [pid] = h.backend_pids()
    await measuring.settled()

    config = catalog.resolve("chat-a")
    assert config is not None
    devices = machine_devices()
    fingerprint = launch_fingerprint(config, Lane.TEXT, Family.LLAMACPP, settings, devices)
    entry = measuring.book.entry("chat-a", fingerprint)
    assert entry is not None, "no measured figure under the launch's fingerprint"
    assert entry.method == "report", "the memory breakdown was not read from the load's output"
    measured = entry.measured.total
    estimate = estimate_config(config, Lane.TEXT, Family.LLAMACPP, devices).total
    print(f"chat-a: estimate {estimate} B, measured {measured} B ({entry.method})")
    assert measured / 2 <= estimate <= measured * 2
    rss = psutil.Process(pid).memory_info().rss
    assert rss / 2 <= measured <= rss * 2, f"process RSS {rss}"
    assert entry.measured.load_seconds is not None and entry.measured.load_seconds > 0

    # The status shows the measured figure in the estimate's place.
    (shown,) = (await client.get("/router/v1/status")).json()["runtimes"]
    assert shown["memory"] == {"device": "host", "bytes": measured, "source": "measured"}

    twin = catalog.resolve("chat-twin")
    assert twin is not None and measuring.book.latest("chat-twin") is None
    twin_estimate = estimate_config(twin, Lane.TEXT, Family.LLAMACPP, devices).total
    assert measured / 2 <= twin_estimate <= measured * 2
