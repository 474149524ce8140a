"""The cluster across real interfaces: master and slaves in their own network namespaces.

Each router runs in its own namespace joined to the master's by a veth pair, so what crosses
the cluster crosses an interface, and the slaves bind non-loopback addresses under `secure`
(keys required). The test process reaches the master over one more veth pair. Skipped, with
the reason, where network namespaces cannot be made (not root, no `ip`).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.harness import PROGRAM_SECTIONS, RouterHarness
from tests.support.router_process import CLI

TOKEN = "netns-cluster-token-0123456789abcdef"
INFERENCE, ADMIN = "netns-inference-key-0123456789", "netns-admin-key-0123456789abc"
PORT = 8080


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _namespaces_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"trprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as err:
        return f"ip netns add failed: {err}"
    _ip("netns", "del", probe)
    return None


@dataclass(frozen=True)
class Namespaces:
    """The three namespaces' name tag and the /16 (`10.N`) their links use."""

    tag: str
    net: str


# Serialises the choice of a subnet between test processes on one machine (two suites at once).
_SUBNET_LOCK = Path("/tmp/tensor-router-netns-subnet.lock")


def _subnets_in_use() -> set[str]:
    found = subprocess.run(
        ["ip", "-4", "-o", "route", "show", "table", "all"],
        check=True,
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    return {".".join(word.split(".")[:2]) for word in found.split() if word.startswith("10.")}


def _pick_subnet(busy: set[str]) -> str:
    # Only the root <-> master pair lives in the root namespace, but a second suite running this
    # test at the same moment would route the same subnet twice: pick one nobody routes yet.
    free = [f"10.{n}" for n in range(64, 128) if f"10.{n}" not in busy]
    if not free:
        pytest.skip("no free 10.64-127.x.x subnet for the namespaces' links")
    return random.choice(free)


@pytest.fixture
def netns() -> Iterator[Namespaces]:
    reason = _namespaces_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:5]
    names = {role: f"tr{tag}{role}" for role in ("m", "s1", "s2")}
    links: list[str] = []
    lock = _SUBNET_LOCK.open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        net = _pick_subnet(_subnets_in_use())
        for ns in names.values():
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        # root <-> master: N.0.1 / N.0.2; master <-> slave i: N.i.1 / N.i.2
        pairs = [(None, names["m"], 0), (names["m"], names["s1"], 1), (names["m"], names["s2"], 2)]
        for left, right, sub in pairs:
            a, b = f"tr{tag}a{sub}", f"tr{tag}b{sub}"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            links.append(a)
            if left is not None:
                _ip("link", "set", a, "netns", left)
            _ip("link", "set", b, "netns", right)
            where_a = ["-n", left] if left else []
            _ip(*where_a, "addr", "add", f"{net}.{sub}.1/24", "dev", a)
            _ip(*where_a, "link", "set", a, "up")
            _ip("-n", right, "addr", "add", f"{net}.{sub}.2/24", "dev", b)
            _ip("-n", right, "link", "set", b, "up")
        fcntl.flock(lock, fcntl.LOCK_UN)  # the root route now marks the subnet as taken
        yield Namespaces(tag, net)
    finally:
        lock.close()
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        for link in links:  # the root end of the root <-> master pair
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=10)


def _config(h: RouterHarness, name: str, cluster: dict[str, Any]) -> Path:
    kcpps = h.tmp / f"kcpps-{name}"
    models = h.tmp / f"models-{name}"
    kcpps.mkdir()
    models.mkdir()
    model_id = f"model-{name}"
    (models / f"{model_id}.gguf").write_bytes(name.encode())
    body = {"backend_mode": "llama_sdcpp", "model_param": str(models / f"{model_id}.gguf")}
    (kcpps / f"{model_id}.kcpps").write_text(json.dumps(body))
    sections = {s: {"binary_path": str(h.binary(f))} for f, s in PROGRAM_SECTIONS.items()}
    config = {
        "security": {"profile": "secure"},
        "server": {"bind": f"0.0.0.0:{PORT}"},
        "auth": {"inference_keys": [INFERENCE], "admin_keys": [ADMIN]},
        "models": {"config_dir": str(kcpps)},
        "analytics": {"database_path": str(h.tmp / f"data-{name}" / "router.sqlite")},
        "runtime": {"stop_grace": 1, "load_timeout": 20},
        "cluster": {"token": TOKEN, **cluster},
        **sections,
    }
    path = h.tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_cluster_across_network_namespaces(
    netns: Namespaces, tmp_harness: RouterHarness
) -> None:
    tag, net = netns.tag, netns.net
    master_cfg = _config(
        tmp_harness,
        "m",
        {
            "role": "master",
            "node_id": "m",
            "health_interval": "0.5s",
            "slave_urls": [f"http://{net}.1.2:{PORT}", f"http://{net}.2.2:{PORT}"],
        },
    )
    configs = {"m": master_cfg}
    for i in (1, 2):
        configs[f"s{i}"] = _config(
            tmp_harness,
            f"s{i}",
            {
                "role": "slave",
                "node_id": f"s{i}",
                "sync_interval": "0.5s",
                "public_url": f"http://{net}.{i}.2:{PORT}",
                "master_url": f"http://{net}.{i}.1:{PORT}",
            },
        )
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []
    try:
        for name, cfg in configs.items():
            log = (tmp_harness.tmp / f"{name}.log").open("wb")
            logs.append(log)
            argv = [
                "ip",
                "netns",
                "exec",
                f"tr{tag}{name}",
                str(CLI),
                "start",
                "--config",
                str(cfg),
            ]
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))  # noqa: ASYNC220
        headers = {"Authorization": f"Bearer {INFERENCE}"}
        async with httpx.AsyncClient(
            base_url=f"http://{net}.0.2:{PORT}", headers=headers, timeout=10
        ) as client:
            ids: list[str] = []
            end = time.monotonic() + 30
            while time.monotonic() < end and ids != ["model-m", "model-s1", "model-s2"]:
                try:
                    reply = await client.get("/v1/models")
                    ids = sorted(m["id"] for m in reply.json()["data"]) if reply.is_success else []
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
            tails = {n: (tmp_harness.tmp / f"{n}.log").read_text()[-1500:] for n in configs}
            assert ids == ["model-m", "model-s1", "model-s2"], tails
            for model in ("model-s1", "model-s2"):
                body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
                reply = await client.post("/v1/chat/completions", json=body)
                assert reply.status_code == 200, reply.text
                assert reply.json()["model"] == model
            # Node routes take the cluster token only: a valid inference key is the wrong role.
            refused = await client.get("/router/v1/node/models")
            assert refused.status_code == 403
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
        for log in logs:
            log.close()
