"""A master and a slave for the Lending page's browser tests (real router processes on
loopback, fake backends, real SQLite stores), started once per test module.

The master `m` has `slow` (context 4096, 20 tokens/s, one at a time), `other`, the image model
`pic` and the vision model `eye`; the slave `s1` has `fast` (8192, 200 tokens/s), `tiny`
(context 1024: "context window too small"), the image model `pic2` and the vision model `eye2`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.cluster import TOKEN
from tests.support.harness import RouterHarness, free_port
from tests.support.lending import folder
from tests.support.router_process import RouterProcess, new_router

TEXT_LINKS = "/router/v1/site/text-routing-groups"
IMAGE_LINKS = "/router/v1/site/routing-groups"
GUARDIANS = "/router/v1/site/guardian-models"
TOKENS = 8


@dataclass
class LendingCluster:
    master: RouterProcess
    slave: RouterProcess
    http: httpx.Client
    master_db: Path

    def get(self, path: str, **params: Any) -> Any:
        reply = self.http.get(path, params=params)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def reset(self) -> None:
        """No links, no guardians, no saved settings: what each test starts from."""
        for anchor in ("slow", "other"):
            self.http.delete(TEXT_LINKS, params={"node_id": "m", "model_id": anchor})
        self.http.delete(IMAGE_LINKS, params={"node_id": "m", "model_id": "pic"})
        for a in self.get(GUARDIANS)["assignments"]:
            query = {"scope": a["scope"], "node_id": a["node_id"], "model_id": a["model_id"]}
            self.http.delete(GUARDIANS, params={k: v for k, v in query.items() if v})
        self.http.delete("/router/v1/site/offload/settings")


def vision(h: RouterHarness, name: str) -> dict[str, Any]:
    projector = h.tmp / f"{name}-proj.gguf"
    projector.write_bytes(b"GGUF")
    return {"contextsize": 4096, "mmproj": str(projector)}


def build(h: RouterHarness) -> tuple[RouterProcess, RouterProcess]:
    h.faults_for_model.update(
        {
            "slow": f"--token-rate 20 --tokens {TOKENS} --parallel 1",
            "fast": f"--token-rate 200 --tokens {TOKENS} --parallel 1",
        }
    )
    mport, sport = free_port(), free_port()
    surl = f"http://127.0.0.1:{sport}"
    master_models = {
        "slow": {"contextsize": 4096},
        "other": {"contextsize": 4096},
        "pic": {"image": True},
        "eye": vision(h, "eye"),
    }
    master = new_router(
        h,
        name="master",
        port=mport,
        kcpps_dir=folder(h, "master", master_models),
        extra={
            "cluster": {
                "role": "master",
                "node_id": "m",
                "token": TOKEN,
                "slave_urls": [surl],
                "public_url": f"http://127.0.0.1:{mport}",
                "health_interval": 0.3,
            },
            "analytics": {
                "database_path": str(h.tmp / "data-master" / "router.sqlite"),
                "flush_interval": 0.2,
            },
        },
    )
    slave_models = {
        "fast": {"contextsize": 8192},
        "tiny": {"contextsize": 1024},
        "pic2": {"image": True},
        "eye2": vision(h, "eye2"),
    }
    slave = new_router(
        h,
        name="s1",
        port=sport,
        kcpps_dir=folder(h, "s1", slave_models),
        extra={
            "cluster": {
                "role": "slave",
                "node_id": "s1",
                "token": TOKEN,
                "public_url": surl,
                "master_url": f"http://127.0.0.1:{mport}",
                "sync_interval": 0.5,
            },
            "analytics": {
                "database_path": str(h.tmp / "data-s1" / "router.sqlite"),
                "flush_interval": 0.2,
            },
        },
    )
    return master, slave
