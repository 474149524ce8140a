"""`tensor-router status|load|unload` against a running router, `/metrics`, and `--ollama`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fakes.wrappers import write_fake_binary
from tests.support.harness import free_port

ADMIN = "adm-cli-control-3c9d5e71"
CLI = [sys.executable, "-m", "router.cli"]


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)  # also after a non-200 answer: no busy loop
    raise AssertionError(f"{url} did not come up")


@pytest.fixture
def router(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    kcpps = tmp_path / "kcpps"
    kcpps.mkdir()
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    (kcpps / "chat-a.kcpps").write_text(json.dumps({"model_param": str(tmp_path / "m.gguf")}))
    port = free_port()
    config = tmp_path / "router.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"bind": f"127.0.0.1:{port}"},
                "auth": {"admin_keys": [ADMIN]},
                "models": {"config_dir": str(kcpps)},
                "llama": {"binary_path": str(write_fake_binary(tmp_path, "llamacpp"))},
            }
        )
    )
    proc = subprocess.Popen([*CLI, "start", "--config", str(config)], stderr=subprocess.DEVNULL)
    try:
        _wait_ready(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}", config
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TENSOR_ROUTER_ADMIN_KEY": ADMIN}
    return subprocess.run(
        [*CLI, *args, "--config", str(config)], env=env, capture_output=True, text=True, timeout=60
    )


def test_status_load_unload_round_trip(router: tuple[str, Path]) -> None:
    _, config = router
    assert "no runtimes" in cli(config, "status").stdout
    loaded = cli(config, "load", "chat-a")
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["status"] == "ready"
    status = cli(config, "status").stdout
    assert "chat-a@text" in status and "ready" in status
    unloaded = cli(config, "unload", "text")
    assert json.loads(unloaded.stdout)["unloaded"] == ["chat-a@text"]
    assert "no runtimes" in cli(config, "status").stdout
    missing = cli(config, "load", "nope")
    assert missing.returncode != 0 and 'model "nope" was not found' in missing.stderr


def test_metrics_expose_requests_loads_and_queues(router: tuple[str, Path]) -> None:
    url, config = router
    assert cli(config, "load", "chat-a").returncode == 0
    reply = httpx.post(
        url + "/v1/chat/completions",
        json={"model": "chat-a", "messages": [{"role": "user", "content": "x"}]},
        headers={"Authorization": f"Bearer {ADMIN}"},  # admin keys also reach model APIs
        timeout=20,
    )
    assert reply.status_code == 200
    assert httpx.get(url + "/metrics", timeout=5).status_code == 401  # admin only
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    assert (
        'tensor_router_requests_total{lane="text",route="/v1/chat/completions",status_class="2xx"} 1.0'
        in text
    )
    assert 'tensor_router_loads_total{family="llamacpp",result="ok"} 1.0' in text
    assert "tensor_router_load_duration_seconds_bucket" in text
    assert 'tensor_router_queued{lane="text"} 0.0' in text
    assert 'tensor_router_runtime_state{runtime="chat-a@text",state="ready"} 1.0' in text


def test_start_with_ollama_also_listens_on_11434(tmp_path: Path) -> None:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 11434)) == 0:
            pytest.fail("port 11434 is already in use on this machine; stop that service first")
    (tmp_path / "kcpps").mkdir()
    port = free_port()
    config = tmp_path / "router.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"bind": f"127.0.0.1:{port}"},
                "models": {"config_dir": str(tmp_path / "kcpps")},
            }
        )
    )
    proc = subprocess.Popen([*CLI, "start", "--ollama", "--config", str(config)])
    try:
        _wait_ready(f"http://127.0.0.1:{port}")
        reply = httpx.get("http://127.0.0.1:11434/api/version", timeout=5)
        assert reply.status_code == 200 and "version" in reply.json()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
