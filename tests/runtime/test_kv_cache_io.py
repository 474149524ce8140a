"""KvCaches against an imitation of llama-server's /slots routes (the seam): deadlines that
bound a slow save or restore, the counter, checksums, and the disk cap removing the oldest file.
The real backend is exercised in tests/real/test_kv_persist_real.py."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from router.backend_client import BackendClient
from router.config import Settings
from router.config.kcpps import parse_kcpps
from router.domain import BackendMode, Lane
from router.records import EventBus
from router.records.metrics import Metrics
from router.runtime.kvcache import KvCaches
from router.runtime.state import Runtime, spec_for


class FakeSlots:
    """GET /slots and POST /slots/{id}?action=save|restore, writing files like llama-server."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.delay = 0.0
        self.size = 1000
        self.restored: list[str] = []
        self.answers = ["same", "same"]  # the probe's greedy answers, before and after
        self.completions = 0

    async def completion(self, request: web.Request) -> web.Response:
        self.completions += 1
        first = self.completions % 2 == 1
        content = self.answers[0 if first else 1]
        return web.json_response({"content": content, "timings": {"prompt_n": 60 if first else 1}})

    async def slots(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)
        return web.json_response([{"id": 0, "n_prompt_tokens": 0}, {"id": 1, "n_prompt_tokens": 9}])

    async def action(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)
        if request.query["action"] == "erase":  # no body, like the router's call
            return web.json_response({"n_erased": 9})
        name = (await request.json())["filename"]
        if request.query["action"] == "save":
            (self.folder / name).write_bytes(os.urandom(self.size))
            return web.json_response({"n_saved": 9})
        self.restored.append(name)
        return web.json_response({"n_restored": 9})


@dataclass
class Rig:
    kv: KvCaches
    runtime: Runtime
    fake: FakeSlots
    seen: list[dict[str, Any]]
    metrics: Metrics

    def __iter__(self) -> Any:  # kv, runtime, fake, seen
        return iter((self.kv, self.runtime, self.fake, self.seen))


@pytest.fixture
async def setup(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    model = tmp_path / "a.gguf"
    model.write_bytes(b"GGUF")
    data = json.dumps(
        {"model_param": str(model), "router_kv_persist": getattr(request, "param", "on")}
    ).encode()
    config = parse_kcpps(tmp_path / "a.kcpps", data, BackendMode.LLAMA_SDCPP)
    settings = Settings.model_validate(
        {
            "runtime": {
                "kv_save_timeout": 0.3,
                "kv_restore_timeout": 0.3,
                "kv_cache_dir_budget": 2500,
            }
        }
    )
    events, metrics, seen = EventBus(), Metrics(), []
    events.subscribe_callback(metrics.on_event)
    events.subscribe_callback(seen.append)
    runtime = Runtime(spec_for(config, Lane.TEXT))
    async with aiohttp.ClientSession() as session:
        kv = KvCaches(settings, BackendClient(session, events), tmp_path / "kv")
        runtime.argv = ["llama-server", "-m", str(model), *kv.launch_args(runtime.spec)]
        fake = FakeSlots(kv.folder(runtime.spec))
        app = web.Application()
        app.router.add_get("/slots", fake.slots)
        app.router.add_post("/slots/{id}", fake.action)
        app.router.add_post("/completion", fake.completion)
        async with TestServer(app) as server:
            runtime.base_url = str(server.make_url("")).rstrip("/")
            yield Rig(kv, runtime, fake, seen, metrics)


def _results(seen: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["action"], e["result"]) for e in seen if e["event"] == "kv_cache"]


async def test_save_then_restore_round_trip(setup: Rig) -> None:
    kv, runtime, fake, seen = setup
    await kv.save(runtime)
    saved = sorted(p.name for p in kv.folder(runtime.spec).iterdir())
    assert len(saved) == 2 and saved[0].endswith("-slot1.bin") and saved[1].endswith(".json")
    await kv.restore(runtime)
    assert fake.restored == [saved[0]]
    assert _results(seen) == [("save", "ok"), ("restore", "ok")]


@pytest.mark.parametrize("action", ["save", "restore"])
async def test_a_slow_backend_is_cut_off_at_the_deadline(setup: Rig, action: str) -> None:
    kv, runtime, fake, seen = setup
    await kv.save(runtime)
    fake.delay = 30.0
    started = time.monotonic()
    await getattr(kv, action)(runtime)  # never raises
    assert time.monotonic() - started < 5.0  # 0.3 s deadline; generous for a loaded machine
    assert _results(seen)[-1] == (action, "timeout")


async def test_missing_or_damaged_files(setup: Rig) -> None:
    kv, runtime, fake, seen = setup
    await kv.restore(runtime)  # nothing saved: nothing to do
    await kv.save(runtime)
    folder = kv.folder(runtime.spec)
    (bin_file,) = folder.glob("*.bin")
    bin_file.write_bytes(b"damaged")
    await kv.restore(runtime)
    assert fake.restored == []  # never sent to the backend
    assert list(folder.iterdir()) == []  # the damaged file and its sidecar are gone
    assert _results(seen) == [("restore", "none"), ("save", "ok"), ("restore", "failed")]


async def test_the_disk_cap_removes_the_oldest_file(setup: Rig) -> None:
    kv, runtime, fake, seen = setup
    other = kv.folder(runtime.spec).parent / "other_text"
    other.mkdir()
    old, newer = other / ("a" * 32 + "-slot0.bin"), other / ("b" * 32 + "-slot0.bin")
    for age, path in ((3000, old), (1000, newer)):
        path.write_bytes(b"x" * 1000)
        stamp = time.time() - age
        os.utime(path, (stamp, stamp))
    await kv.save(runtime)  # 1000 more bytes over a 2500-byte cap: the oldest goes
    assert not old.exists() and newer.exists()
    assert list(kv.folder(runtime.spec).glob("*.bin"))


async def test_results_are_counted(setup: Rig) -> None:
    kv, runtime, fake, seen = setup
    await kv.save(runtime)
    fake.delay = 30.0
    await kv.restore(runtime)
    text = setup.metrics.render().decode()
    assert 'tensor_router_kv_cache_operations_total{action="save",result="ok"} 1.0' in text
    assert 'tensor_router_kv_cache_operations_total{action="restore",result="timeout"} 1.0' in text


@pytest.mark.parametrize("setup", ["auto"], indirect=True)
@pytest.mark.parametrize("same", [True, False])
async def test_auto_follows_a_stored_probe(setup: Rig, same: bool) -> None:
    kv, runtime, fake, seen = setup
    if not same:
        fake.answers = ["same", "different"]
    await kv.restore(runtime)  # the first load probes
    await kv.restore(runtime)  # later loads reuse the stored verdict
    assert fake.completions == 2
    probe = kv.probe_result(runtime)
    assert probe is not None and probe["passed"] is same
    await kv.save(runtime)
    expected = [("probe", "passed"), ("restore", "none"), ("restore", "none"), ("save", "ok")]
    assert _results(seen) == (expected if same else [("probe", "rejected")])
    # The probe's own file never stays behind.
    assert not list(kv.folder(runtime.spec).glob("probe-*"))
