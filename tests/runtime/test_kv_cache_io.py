"""KvCaches against an imitation of llama-server's /slots routes (the seam): deadlines that
bound a slow save or restore, the counter, checksums, and the disk cap removing the oldest file;
and the KV rows of test-audit section 7 with exact outcomes (a restore refreshes a file's age,
the cap spares the current key's files, another binary is another key, a failed probe is kept).
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
        self.actions = 0  # slot actions asked for, answered or not
        self.tokens = {0: 0, 1: 9}  # tokens held per slot: the ones holding some are saved
        self.slot_actions = True  # False: a llama-server launched without --slot-save-path
        self.contexts: dict[int, int] = {}  # n_ctx per slot, when told

    async def completion(self, request: web.Request) -> web.Response:
        self.completions += 1
        first = self.completions % 2 == 1
        content = self.answers[0 if first else 1]
        return web.json_response({"content": content, "timings": {"prompt_n": 60 if first else 1}})

    async def slots(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)
        rows = [{"id": i, "n_prompt_tokens": n} for i, n in self.tokens.items()]
        for row in rows:
            if row["id"] in self.contexts:
                row["n_ctx"] = self.contexts[row["id"]]
        return web.json_response(rows)

    async def action(self, request: web.Request) -> web.Response:
        self.actions += 1
        await asyncio.sleep(self.delay)
        if not self.slot_actions:
            return web.json_response({"error": {"message": "slot actions are off"}}, status=501)
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
    # The persist mode, or (mode, disk budget) for a test that needs room for whole states.
    param = getattr(request, "param", "on")
    mode, budget = (param, 2500) if isinstance(param, str) else param
    data = json.dumps({"model_param": str(model), "router_kv_persist": mode}).encode()
    config = parse_kcpps(tmp_path / "a.kcpps", data, BackendMode.LLAMA_SDCPP)
    settings = Settings.model_validate(
        {
            "runtime": {
                "kv_save_timeout": 0.3,
                "kv_restore_timeout": 0.3,
                "kv_cache_dir_budget": budget,
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


# ---- test-audit section 7, the KV rows: exact outcomes a wrong cap, key or probe would change


def _age(path: Path, seconds: float) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def _bins(root: Path) -> set[str]:
    return {f"{p.parent.name}/{p.name}" for p in root.glob("*/*.bin")}


def _other_key_file(kv: KvCaches, runtime: Runtime, age: float) -> Path:
    """A 1000-byte file another configuration saved `age` seconds ago."""
    other = kv.folder(runtime.spec).parent / "other_text"
    other.mkdir(exist_ok=True)
    path = other / ("b" * 32 + "-slot0.bin")
    path.write_bytes(b"x" * 1000)
    _age(path, age)
    return path


async def test_a_restore_makes_its_file_recent_for_the_disk_cap(setup: Rig) -> None:
    kv, runtime, fake, seen = setup
    await kv.save(runtime)  # key 1's file, then aged: it was saved long ago
    (restored,) = kv.folder(runtime.spec).glob("*.bin")
    _age(restored, 3000)
    other = _other_key_file(kv, runtime, 1000)
    await kv.restore(runtime)  # used again now: it is the most recent of the two
    assert fake.restored == [restored.name]
    runtime.argv = [*runtime.argv, "-c", "4096"]  # another key (context) in the same folder
    await kv.save(runtime)  # 3000 bytes over a 2500-byte cap: the least recently used goes
    (newest,) = set(kv.folder(runtime.spec).glob("*.bin")) - {restored}
    assert _bins(kv.folder(runtime.spec).parent) == {
        f"{restored.parent.name}/{restored.name}",
        f"{newest.parent.name}/{newest.name}",
    }
    assert not other.exists()


async def test_the_disk_cap_keeps_the_current_keys_set_and_removes_older_keys(
    setup: Rig,
) -> None:
    kv, runtime, fake, seen = setup
    fake.tokens = {0: 9, 1: 9}
    await kv.save(runtime)  # both slots, long ago
    for path in kv.folder(runtime.spec).glob("*.bin"):
        _age(path, 3000)
    other = _other_key_file(kv, runtime, 1000)  # another key's, more recent than those
    await kv.save(runtime)  # both slots again: 3000 bytes over a 2500-byte cap, one file goes
    # The save replaced the key's set (the earlier files went, not counted against the cap);
    # of the rest, the other key's file goes, never the set just saved.
    slot0, slot1 = sorted(kv.folder(runtime.spec).glob("*.bin"))
    assert _bins(kv.folder(runtime.spec).parent) == {
        f"{slot0.parent.name}/{slot0.name}",
        f"{slot1.parent.name}/{slot1.name}",
    }
    assert not other.exists()
    assert _results(seen) == [("save", "ok"), ("save", "ok")]


async def test_a_save_replaces_what_was_saved_before_for_the_key(setup: Rig) -> None:
    """Issue 33: no stale slot files. Slot 0's older state never adds up with slot 1's new."""
    kv, runtime, fake, seen = setup
    folder = kv.folder(runtime.spec)
    fake.tokens = {0: 9, 1: 9}
    await kv.save(runtime)
    earlier = set(folder.iterdir())
    fake.tokens = {0: 0, 1: 9}  # llama-server used the other slot since
    await kv.save(runtime)
    (newest,) = folder.glob("*.bin")
    assert newest.name.endswith("-slot1.bin")
    assert earlier & set(folder.iterdir()) == set()  # the earlier set and its sidecars went
    manifest = folder.parent / "slot-sets" / f"{folder.name}-{newest.name[:32]}.json"
    assert json.loads(manifest.read_text()) == {"files": [newest.name]}
    await kv.restore(runtime)
    assert fake.restored == [newest.name]  # only the set just saved
    fake.tokens = {0: 0, 1: 0}  # an unload right after a cleared turn: the empty set
    await kv.save(runtime)
    await kv.restore(runtime)
    assert list(folder.iterdir()) == [] and fake.restored == [newest.name]
    assert not manifest.exists()


async def test_a_crash_between_the_files_and_the_manifest_keeps_the_old_set(setup: Rig) -> None:
    kv, runtime, fake, seen = setup
    folder = kv.folder(runtime.spec)
    await kv.save(runtime)
    (old,) = folder.glob("*.bin")
    stray = folder / old.name.replace("-slot1", "-slot0")  # a new file no manifest named
    stray.write_bytes(b"half a save")
    await kv.restore(runtime)
    assert fake.restored == [old.name]
    await kv.save(runtime)  # the next commit removes the stray with the old set
    assert not stray.exists() and not old.exists()


async def test_a_restore_skips_a_state_larger_than_its_slots_context(setup: Rig) -> None:
    kv, runtime, fake, seen = setup
    fake.tokens = {0: 9, 1: 9}
    await kv.save(runtime)  # 9 tokens in each slot
    fake.contexts = {0: 8, 1: 4096}  # slot 0 holds 8 now; slot 1 holds 9
    await kv.restore(runtime)
    assert [n[-9:] for n in fake.restored] == ["slot1.bin"]
    assert [p.name[-9:] for p in kv.folder(runtime.spec).glob("*.bin")] == ["slot1.bin"]
    assert _results(seen) == [("save", "ok"), ("restore", "ok")]


@pytest.mark.parametrize("change", ["size", "mtime"])
async def test_another_backend_binary_restores_nothing(
    setup: Rig, tmp_path: Path, change: str
) -> None:
    kv, runtime, fake, seen = setup
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_bytes(b"build 1")
    _age(binary, 600)
    runtime.argv = [str(binary), *runtime.argv[1:]]
    await kv.save(runtime)
    await kv.restore(runtime)  # the same binary: its slot comes back
    (saved,) = kv.folder(runtime.spec).glob("*.bin")
    assert fake.restored == [saved.name]
    if change == "size":
        binary.write_bytes(b"build 22")
        _age(binary, 600)
    else:
        _age(binary, 60)  # rebuilt in place, same size
    await kv.restore(runtime)
    assert fake.restored == [saved.name]  # nothing sent for the other binary
    assert _results(seen) == [("save", "ok"), ("restore", "ok"), ("restore", "none")]


@pytest.mark.parametrize("setup", ["auto"], indirect=True)
async def test_a_failed_probe_is_stored_and_not_rerun_at_the_next_load(setup: Rig) -> None:
    kv, runtime, fake, seen = setup
    fake.slot_actions = False
    await kv.restore(runtime)  # first load: the probe's first slot action is refused
    await kv.restore(runtime)  # second load: the stored verdict, no probe
    assert fake.actions == 1 and fake.completions == 0
    probe = kv.probe_result(runtime)
    assert probe is not None and probe["passed"] is False
    assert "answered 501" in probe["error"]
    assert _results(seen) == [("probe", "failed")]
    await kv.save(runtime)  # persistence stays off: nothing is saved either
    assert fake.actions == 1 and list(kv.folder(runtime.spec).glob("*.bin")) == []


@pytest.mark.parametrize("setup", [("on", 10**7)], indirect=True)
@pytest.mark.parametrize(("slots", "clears"), [(["-np", "1"], 0), ([], 1)])
async def test_a_returning_conversation_is_restored_without_a_task_unless_slots_share_cells(
    setup: Rig, slots: list[str], clears: int
) -> None:
    """The router launches named slots, each with cells of its own: the restore goes straight
    into the slot. Only llama-server's shared buffer (no `-np`) needs the one-token task that
    clears idle slots first; on the request path it cost up to 1.8 s (docs/swaps.md)."""
    kv, runtime, fake, seen = setup
    runtime.argv = [*runtime.argv, *slots]
    prompt = "the river and the mill " * 20
    body = json.dumps({"prompt": prompt}).encode()
    assert await kv.before_forward(runtime, "/completion", body) is None  # noted
    await kv.save(runtime)  # replayed into slot 0 and saved
    assert _results(seen) == [("save", "ok")]
    before = fake.completions
    longer = json.dumps({"prompt": prompt + "and then?"}).encode()
    pinned = await kv.before_forward(runtime, "/completion", longer)
    assert pinned is not None and json.loads(pinned)["id_slot"] == 0
    assert len(fake.restored) == 1 and "-conv" in fake.restored[0]
    assert fake.completions - before == clears
