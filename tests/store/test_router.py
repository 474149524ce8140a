"""The store wired into the router: analytics events, load errors, load captures, model state,
download (S28), no prompt text in the database, and R29 against a real router process."""

from __future__ import annotations

import base64
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from router.appkeys import STORE
from tests.fakes.wrappers import write_fake_binary
from tests.support.harness import RouterHarness, chat, free_port

ADMIN = "adm-store-test-7f3a91c2"


def db_rows(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


async def test_each_request_is_one_analytics_event_with_usage(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    for _ in range(3):
        assert (await client.post("/v1/chat/completions", json=chat("chat-a"))).status_code == 200
    assert (await client.post("/v1/chat/completions", json=chat("nope"))).status_code == 404
    flushed = (await client.post("/router/v1/site/analytics/flush")).json()
    assert flushed["persisted"] == ["local"]
    assert harness.app is not None
    events = harness.app[STORE]._events  # committed by the helper process, which is still up
    assert events is not None and not events.failed and events.pending == 0
    rows = db_rows(
        harness.tmp / "data" / "router.sqlite",
        "SELECT route, model, status, queue_wait_ms, duration_ms, completion_tokens FROM analytics_events",
    )
    assert len(rows) == 4
    ok = [r for r in rows if r[2] == 200]
    assert len(ok) == 3 and all(r[0] == "/v1/chat/completions" and r[1] == "chat-a" for r in ok)
    assert all(r[3] is not None and r[4] > 0 and r[5] for r in ok)
    summary = (await client.get("/router/v1/site/analytics")).json()
    assert json.dumps(summary).count("chat-a") >= 1


async def test_failed_load_is_a_load_error_with_exit_code_and_tail(harness: RouterHarness) -> None:
    harness.model("broken")
    harness.faults["llamacpp"] = "--exit-at-start 3"
    client = await harness.start()
    r = await client.post("/v1/chat/completions", json=chat("broken"))
    assert r.status_code == 502
    errors = (await client.get("/router/v1/site/load-errors")).json()
    records = errors.get("errors", errors) if isinstance(errors, dict) else errors
    assert records and records[0]["model"] == "broken" and records[0]["exit_code"] == 3
    assert records[0]["output_tail"]
    removed = (await client.delete("/router/v1/site/load-errors")).json()
    assert removed["removed"] == 1


async def test_load_captures_record_argv_and_output(harness: RouterHarness) -> None:
    harness.model("chat-a")
    settings = harness.settings()
    settings = settings.model_copy(
        update={"analytics": settings.analytics.model_copy(update={"load_capture_enabled": True})}
    )
    client = await harness.start(settings)
    assert (await client.post("/v1/chat/completions", json=chat("chat-a"))).status_code == 200
    listing = (await client.get("/router/v1/site/load-captures")).json()
    captures = (
        listing.get("captures", listing.get("items", listing))
        if isinstance(listing, dict)
        else listing
    )
    assert captures, listing
    attempt = captures[0]["attempt_id"] if "attempt_id" in captures[0] else captures[0]["id"]
    detail = (await client.get(f"/router/v1/site/load-captures/{attempt}")).json()
    assert "--port" in json.dumps(detail)
    page = (
        await client.get(f"/router/v1/site/load-captures/{attempt}/output?after_sequence=0")
    ).json()
    chunks = page.get("chunks", page.get("output", []))
    data = b"".join(base64.b64decode(c["data"]) for c in chunks)
    assert data, page


async def test_disabled_state_survives_a_restart(harness: RouterHarness, tmp_path: Path) -> None:
    harness.model("chat-a")
    client = await harness.start()
    r = await client.post(
        "/router/v1/site/models/state", json={"model": "chat-a", "disabled": True}
    )
    assert r.status_code == 200
    await harness.close()
    again = RouterHarness(tmp_path)
    client = await again.start()
    try:
        ids = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
        assert "chat-a" not in ids
    finally:
        await again.close()
    harness.client = harness.server = None


async def test_no_prompt_or_reply_text_in_the_database(harness: RouterHarness) -> None:
    marker = "zebra-marker-5f2c8e1d"
    harness.model("chat-a")
    client = await harness.start()
    body = chat("chat-a")
    body["messages"] = [{"role": "user", "content": marker}]  # type: ignore[index]
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    r = await client.get("/router/v1/site/store/download", params={"node_id": "local"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/vnd.sqlite3")
    assert "analytics-local-" in r.headers["content-disposition"]
    assert r.content.startswith(b"SQLite format 3\x00")
    assert marker.encode() not in r.content
    assert (
        await client.get("/router/v1/site/store/download", params={"node_id": "other"})
    ).status_code == 404


def _router_process(tmp: Path, flush_interval: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    kcpps = tmp / "kcpps"
    kcpps.mkdir()
    (tmp / "m.gguf").write_bytes(b"GGUF")
    (kcpps / "chat-a.kcpps").write_text(json.dumps({"model_param": str(tmp / "m.gguf")}))
    port = free_port()
    db = tmp / "data" / "router.sqlite"
    config = {
        "server": {"bind": f"127.0.0.1:{port}"},
        "auth": {"admin_keys": [ADMIN], "inference_keys": ["inf-store-test-0b6e2d94"]},
        "models": {"config_dir": str(kcpps)},
        "analytics": {"database_path": str(db), "flush_interval": flush_interval},
        "llama": {"binary_path": str(write_fake_binary(tmp, "llamacpp"))},
    }
    (tmp / "router.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", "start", "--config", str(tmp / "router.yaml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return proc, base, db
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("router did not start")


def _send(base: str, n: int) -> None:
    headers = {"Authorization": "Bearer inf-store-test-0b6e2d94"}
    with httpx.Client(base_url=base, headers=headers, timeout=20) as client:
        for _ in range(n):
            assert client.post("/v1/chat/completions", json=chat("chat-a")).status_code == 200


def test_r29_graceful_stop_loses_no_buffered_event(tmp_path: Path) -> None:
    proc, base, db = _router_process(tmp_path, "1h")  # nothing is flushed before the stop
    try:
        _send(base, 25)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert db_rows(db, "SELECT count(*) FROM analytics_events") == [(25,)]


def test_r29_sigkill_loses_at_most_one_flush_window(tmp_path: Path) -> None:
    proc, base, db = _router_process(tmp_path, "0.2s")
    try:
        _send(base, 20)
        time.sleep(0.8)  # several flush windows pass
        _send(base, 5)  # these may be in the last, unflushed window
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    time.sleep(2.5)  # the watchdog stops the orphaned backend (R4)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        count = conn.execute("SELECT count(*) FROM analytics_events").fetchone()[0]
    assert 20 <= count <= 25


def test_cli_analytics_and_errors_against_a_running_router(tmp_path: Path) -> None:
    proc, base, _ = _router_process(tmp_path, "0.2s")
    env = {**os.environ, "TENSOR_ROUTER_ADMIN_KEY": ADMIN}
    cli = [sys.executable, "-m", "router.cli"]
    try:
        _send(base, 3)
        out = subprocess.run(
            [*cli, "analytics", "--url", base], env=env, capture_output=True, text=True, timeout=30
        )
        assert out.returncode == 0, out.stderr
        row = next(line for line in out.stdout.splitlines() if line.startswith("chat-a"))
        assert row.split()[1] == "3"
        out = subprocess.run(
            [*cli, "errors", "--url", base], env=env, capture_output=True, text=True, timeout=30
        )
        assert out.returncode == 0 and "no load errors" in out.stdout
        denied = subprocess.run(
            [*cli, "errors", "--url", base],
            env={**os.environ, "TENSOR_ROUTER_ADMIN_KEY": ""},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert denied.returncode != 0 and "401" in denied.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
