"""Backend init jobs on a real router: a tiny fake recipe whose steps are real commands.

The recipe file (`setup.recipes_file`) is the same data as backends/recipes.py's built-in
recipes; its steps are `python -c` programs that write a script answering `--version` into
the build's prefix, print to stdout and stderr, and (the `hold` step) wait for a gate file
the test creates, after starting a grandchild, so a cancel can be seen to stop the whole
process group. TENSOR_ROUTER_BACKENDS_DIR points at a temporary root: nothing real is built.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.registry import adapter_for
from router.appkeys import EVENTS
from router.config import Settings
from router.domain import Family
from router.setup import SetupJob
from tests.support.harness import RouterHarness, wait_for

INIT = "/router/v1/site/nodes/backends/init"
STATE = "/router/v1/site/nodes/state"
# Writes {prefix}/bin/<name>: a script printing `fake <label>` for --version (label from a file
# the test controls, so an old and a new build can be told apart).
WRITE = (
    "import os, sys; prefix, name, label = sys.argv[1], sys.argv[2], open(sys.argv[3]).read();"
    "os.makedirs(prefix + '/bin', exist_ok=True); path = prefix + '/bin/' + name;"
    "open(path, 'w').write('#!/bin/sh\\necho fake ' + label + '\\n'); os.chmod(path, 0o755);"
    "print('wrote', name, flush=True); print('a warning on stderr', file=sys.stderr, flush=True)"
)
# Starts a grandchild, records both pids, then waits for the gate file (at most 120 s).
HOLD = (
    "import os, subprocess, sys, time; marker, gate = sys.argv[1], sys.argv[2];"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']);"
    "open(marker + '.tmp', 'w').write(f'{os.getpid()} {child.pid}'); os.replace(marker + '.tmp', marker);"
    "end = time.time() + 120\n"
    "while not os.path.exists(gate) and time.time() < end: time.sleep(0.02)\n"
    "child.kill(); print('held', flush=True); sys.exit(0 if os.path.exists(gate) else 9)"
)


def recipe(
    name: str, family: str, tmp: Path, *, probe: list[str] | None = None, fail: bool = False
) -> dict[str, Any]:
    py = sys.executable
    steps = [
        {"name": "write", "argv": [py, "-c", WRITE, "{prefix}", name, str(tmp / "label")]},
        {"name": "hold", "argv": [py, "-c", HOLD, str(tmp / f"{name}.pids"), str(tmp / "gate")]},
    ]
    if fail:
        steps.insert(1, {"name": "break", "argv": [py, "-c", "import sys; sys.exit(3)"]})
    return {
        "backend_id": name,
        "family": family,
        "version": f"{name}-fake-1",
        "steps": steps,
        "binary": f"bin/{name}",
        "probe": probe or ["{binary}", "--version"],
        "export": name,
    }


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    built = tmp_path / "built"
    monkeypatch.setenv("TENSOR_ROUTER_BACKENDS_DIR", str(built))
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + ":/usr/bin:/bin")
    (tmp_path / "label").write_text("v1")
    return built


def settings_with_recipes(
    h: RouterHarness, recipes: list[dict[str, Any]], **setup: Any
) -> Settings:
    path = h.tmp / "recipes.json"
    path.write_text(json.dumps({"recipes": recipes}))
    base = h.settings()
    # No binary_path for the families built here: the loader must find the built one.
    setup = {"recipes_file": path, "cancel_grace": 2, **setup}
    update: dict[str, Any] = {
        "setup": base.setup.model_copy(update=setup),
        "whispercpp": base.whispercpp.model_copy(update={"binary_path": None}),
        "sdcpp": base.sdcpp.model_copy(update={"binary_path": None}),
    }
    return base.model_copy(update=update)


async def start(h: RouterHarness, *extra: dict[str, Any]) -> httpx.AsyncClient:
    recipes = [recipe("whisper-server", "whispercpp", h.tmp), *extra]
    return await h.start(settings_with_recipes(h, recipes))


async def job_done(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    """The job once it ended: its event stream closes at the end (the client's 30 s bound)."""
    await client.get(f"{INIT}/{job_id}/events")
    record: dict[str, Any] = (await client.get(f"{INIT}/{job_id}")).json()
    assert record["state"] != "running", record
    return record


def backend(state: dict[str, Any], backend_id: str) -> dict[str, Any]:
    return next(b for b in state["backends"] if b["id"] == backend_id)


def run_version(path: Path) -> str:
    return subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].startswith("Z")  # a zombie has exited
    except FileNotFoundError:
        return True


async def test_init_builds_reports_progress_and_swaps_in(
    harness: RouterHarness, root: Path
) -> None:
    h = harness
    client = await start(h)
    bus: list[dict[str, Any]] = []
    assert h.app is not None
    h.app[EVENTS].subscribe_callback(bus.append)
    before = backend((await client.get(STATE)).json(), "whisper-server")
    assert before["lifecycle_state"] == "not_initialized" and before["installed"] is False

    answer = await client.post(INIT, json={"backend_id": "whisper-server"})
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert job["state"] == "running" and job["steps"] == 2 and job["backend_id"] == "whisper-server"
    assert await wait_for(lambda: (h.tmp / "whisper-server.pids").exists(), 30)
    state = backend((await client.get(STATE)).json(), "whisper-server")
    assert state["lifecycle_state"] == "initializing"
    assert state["initialization_phase"] == "hold" and state["initialization_step"] == 2

    # One build of a backend at a time: the second is a 409 in the control error shape.
    second = await client.post(INIT, json={"backend_id": "whisper-server"})
    assert second.status_code == 409
    assert second.json()["error"]["type"] == "conflict_error"
    assert job["id"] in second.json()["error"]["message"]

    (h.tmp / "gate").write_text("open")
    done = await job_done(client, job["id"])
    assert done["state"] == "succeeded", done
    assert done["probe_output"] == "fake v1" and done["error"] is None

    events = await client.get(f"{INIT}/{job['id']}/events")
    phases = [
        json.loads(line[6:])["phase"]
        for line in events.text.splitlines()
        if line.startswith("data: ")
    ]
    assert phases == ["preparing", "write", "hold", "probing", "swapping", "done"]

    out = (await client.get(f"{INIT}/{job['id']}/output")).json()
    chunks = [(c["stream"], base64.b64decode(c["data"]).decode()) for c in out["chunks"]]
    stdout = "".join(text for stream, text in chunks if stream == "stdout")
    assert stdout == "wrote whisper-server\nheld\nfake v1\n"  # in order; the probe's last
    assert "".join(text for stream, text in chunks if stream == "stderr") == "a warning on stderr\n"
    assert [c["sequence"] for c in out["chunks"]] == list(range(1, len(chunks) + 1))
    assert out["finished"] is True and out["truncated"] is False

    exported = root / "bin" / "whisper-server"
    assert run_version(exported) == "fake v1\n"
    # The loader's lookup finds the new build (no binary_path, not on PATH).
    assert adapter_for(Family.WHISPERCPP).program(
        h.settings().model_copy(
            update={"whispercpp": h.settings().whispercpp.model_copy(update={"binary_path": None})}
        )
    ) == [str(exported)]
    after = backend((await client.get(STATE)).json(), "whisper-server")
    assert after["lifecycle_state"] == "ready"
    assert after["runtime_version"] == "whisper-server-fake-1"
    assert after["initialization_state"] == "succeeded"
    assert not list((root / "whisper-server").glob("work-*"))
    # The same progress went to /router/v1/events.
    announced = [e["phase"] for e in bus if e["event"] == "backend_init"]
    assert announced == phases


async def test_a_step_past_its_deadline_fails_and_is_stopped(
    harness: RouterHarness, root: Path
) -> None:
    h = harness
    recipes = [recipe("whisper-server", "whispercpp", h.tmp)]
    client = await h.start(settings_with_recipes(h, recipes, step_timeout=1))
    job = (await client.post(INIT, json={"backend_id": "whisper-server"})).json()
    record = await job_done(client, job["id"])
    assert record["state"] == "failed", record
    assert record["error"] == "step hold ran longer than 1 s (setup.step_timeout)"
    step_pid, grandchild = map(int, (h.tmp / "whisper-server.pids").read_text().split())
    assert gone(step_pid) and gone(grandchild)
    assert not list((root / "whisper-server" / "builds").iterdir())


def test_output_is_capped_and_marked_truncated() -> None:
    job = SetupJob("0" * 32, "local", "x", "1", ["a"], cap_bytes=10)
    job.output("stdout", b"12345678")
    job.output("stderr", b"abcdef")
    job.output("stdout", b"dropped")
    job.output("other", b"ignored")
    assert [(c[1], c[3], c[4]) for c in job.chunks] == [
        ("stdout", b"12345678", False),
        ("stderr", b"ab", True),
    ]
    record = job.record()
    assert record["output_bytes"] == 10 and record["output_truncated"] is True


async def test_cancel_mid_build_keeps_the_old_build(harness: RouterHarness, root: Path) -> None:
    h = harness
    client = await start(h)
    (h.tmp / "gate").write_text("open")
    first = (await client.post(INIT, json={"backend_id": "whisper-server"})).json()
    assert (await job_done(client, first["id"]))["state"] == "succeeded"
    old_build = (root / "whisper-server" / "current").resolve()
    (h.tmp / "gate").unlink()
    (h.tmp / "whisper-server.pids").unlink()
    (h.tmp / "label").write_text("v2")

    job = (await client.post(INIT, json={"backend_id": "whisper-server"})).json()
    pids = h.tmp / "whisper-server.pids"
    assert await wait_for(pids.exists, 30)
    step_pid, grandchild = map(int, pids.read_text().split())
    staging = [p for p in (root / "whisper-server" / "builds").iterdir() if p != old_build]
    assert len(staging) == 1 and (staging[0] / "bin" / "whisper-server").exists()

    cancelled = await client.post(f"{INIT}/cancel", json={"backend_id": "whisper-server"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled" and cancelled.json()["id"] == job["id"]
    assert gone(step_pid) and await wait_for(lambda: gone(grandchild), 5)
    assert not staging[0].exists() and not list((root / "whisper-server").glob("work-*"))
    assert (root / "whisper-server" / "current").resolve() == old_build
    assert run_version(root / "bin" / "whisper-server") == "fake v1\n"
    state = backend((await client.get(STATE)).json(), "whisper-server")
    assert state["lifecycle_state"] == "ready" and state["initialization_state"] == "cancelled"
    assert state["retryable"] is True
    # Nothing runs any more: a second cancel is a 409, a new init may start.
    again = await client.post(f"{INIT}/cancel", json={"backend_id": "whisper-server"})
    assert again.status_code == 409


async def test_failed_step_and_failed_probe_leave_nothing(
    harness: RouterHarness, root: Path
) -> None:
    h = harness
    broken = recipe("sd-server", "sdcpp", h.tmp, fail=True)
    no_version = recipe("llama-server", "llamacpp", h.tmp, probe=["{binary}", "--version", "x"])
    no_version["steps"][0]["argv"][2] = WRITE.replace("echo fake", "exit 4; echo")
    client = await start(h, broken, no_version)
    (h.tmp / "gate").write_text("open")
    failed = (await client.post(INIT, json={"backend_id": "sd-server"})).json()
    record = await job_done(client, failed["id"])
    assert record["state"] == "failed" and record["error"] == "step break exited 3"
    assert record["retryable"] is True and record["step_name"] == "break"  # where it stopped
    assert not list((root / "sd-server" / "builds").iterdir())
    state = backend((await client.get(STATE)).json(), "sd-server")
    assert state["lifecycle_state"] == "failed" and state["error"] == "step break exited 3"

    job = (await client.post(INIT, json={"backend_id": "llama-server"})).json()
    record = await job_done(client, job["id"])
    assert record["state"] == "failed"
    assert "fails its version probe: step probe exited 4" in record["error"]
    assert not (root / "llama-server" / "current").exists()
    assert not (root / "bin" / "llama-server").exists()


async def test_a_build_without_its_companion_is_not_swapped_in(
    harness: RouterHarness, root: Path
) -> None:
    """llama.cpp's RPC server is probed beside llama-server: a build without it fails."""
    h = harness
    lacking = recipe("llama-server", "llamacpp", h.tmp)
    lacking["companions"] = [{"export": "rpc", "binary": "bin/rpc", "probe": ["{binary}"]}]
    client = await start(h, lacking)
    (h.tmp / "gate").write_text("open")
    job = (await client.post(INIT, json={"backend_id": "llama-server"})).json()
    record = await job_done(client, job["id"])
    assert record["state"] == "failed" and "produced no rpc" in record["error"]
    assert not (root / "llama-server" / "current").exists()


async def test_bad_init_requests(harness: RouterHarness, root: Path) -> None:
    h = harness
    client = await start(h)
    for body, param in (
        ({}, "backend_id"),
        ({"backend_id": "kobold"}, "backend_id"),
        ({"backend_id": 5}, "backend_id"),
        ({"backend_id": "whisper-server", "profile": 1}, "profile"),
    ):
        answer = await client.post(INIT, json=body)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == param, body
    assert (
        await client.post(INIT, json={"backend_id": "whisper-server", "node_id": "x"})
    ).status_code == 404
    assert (await client.get(f"{INIT}/{'0' * 32}")).status_code == 404
    assert (await client.get(f"{INIT}/nope/output")).status_code == 404
    bad_page = await client.get(f"{INIT}/{'0' * 32}/output", params={"after_sequence": "-1"})
    assert bad_page.status_code == 400
    listed = (await client.get(INIT, params={"backend_id": "whisper-server"})).json()
    assert [b["id"] for b in listed["backends"]] == ["whisper-server"]


async def test_make_build_holding_the_lock_is_a_409(harness: RouterHarness, root: Path) -> None:
    from backends.installs import Layout

    client = await start(harness)
    with Layout(root, "whisper-server").lock(wait=False):
        answer = await client.post(INIT, json={"backend_id": "whisper-server"})
    assert answer.status_code == 409
    assert "another process" in answer.json()["error"]["message"]


async def test_finished_jobs_survive_a_restart(harness: RouterHarness, root: Path) -> None:
    h = harness
    client = await start(h)
    (h.tmp / "gate").write_text("open")
    job = (await client.post(INIT, json={"backend_id": "whisper-server"})).json()
    assert (await job_done(client, job["id"]))["state"] == "succeeded"
    await h.close()
    client = await start(h)
    record = (await client.get(f"{INIT}/{job['id']}")).json()
    assert record["state"] == "succeeded" and record["backend_id"] == "whisper-server"
    out = (await client.get(f"{INIT}/{job['id']}/output", params={"limit": "1"})).json()
    assert len(out["chunks"]) == 1 and out["more"] is True and out["finished"] is True
    events = await client.get(f"{INIT}/{job['id']}/events")
    assert '"state": "succeeded"' in events.text
    state = backend((await client.get(STATE)).json(), "whisper-server")
    assert state["initialization_job_id"] == job["id"]


async def test_router_stop_cancels_a_running_build(harness: RouterHarness, root: Path) -> None:
    h = harness
    client = await start(h)
    await client.post(INIT, json={"backend_id": "whisper-server"})
    assert await wait_for((h.tmp / "whisper-server.pids").exists, 30)
    step_pid, grandchild = map(int, (h.tmp / "whisper-server.pids").read_text().split())
    await h.close()
    assert gone(step_pid) and gone(grandchild)
    assert not list((root / "whisper-server" / "builds").iterdir())
    assert not (root / "bin" / "whisper-server").exists()


async def test_events_stream_follows_a_running_job(harness: RouterHarness, root: Path) -> None:
    h = harness
    client = await start(h)
    job = (await client.post(INIT, json={"backend_id": "whisper-server"})).json()
    seen: list[dict[str, Any]] = []
    async with client.stream("GET", f"{INIT}/{job['id']}/events") as stream:
        assert stream.headers["content-type"] == "text/event-stream"
        async for line in stream.aiter_lines():
            if not line.startswith("data: "):
                continue
            seen.append(json.loads(line[6:]))
            if seen[-1]["phase"] == "hold":  # live: the build waits for the gate now
                (h.tmp / "gate").write_text("open")
    assert [e["phase"] for e in seen][-1] == "done" and seen[-1]["state"] == "succeeded"
    assert all(e["event"] == "backend_init" and e["job_id"] == job["id"] for e in seen)
    assert seen[2]["step"] == 2 and seen[2]["steps"] == 2 and seen[2]["step_name"] == "hold"
