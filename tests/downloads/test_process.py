"""Downloads through a real `tensor-router start` process: a job survives a killed router and
resumes from its staged bytes; `tensor-router download` follows a job with a progress bar."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import httpx
import yaml

from tests.fakes.fake_hub import FakeHub
from tests.support.download_helpers import BASE, library_files, wait_bytes, wait_job
from tests.support.harness import RouterHarness
from tests.support.router_process import CLI, RouterProcess, new_router


def with_downloads(r: RouterProcess, hub: FakeHub, library: Path) -> RouterProcess:
    config = yaml.safe_load(r.config.read_text())
    config["downloads"] = {
        "endpoint": hub.endpoint,
        "dir": str(library),
        "free_space_reserve_gb": 0,
    }
    r.config.write_text(yaml.safe_dump(config))
    return r


async def test_a_job_survives_a_killed_router_and_resumes(
    tmp_harness: RouterHarness, hub: FakeHub
) -> None:
    hub.rate = 128 * 1024
    library = tmp_harness.tmp / "library"
    first = with_downloads(new_router(tmp_harness), hub, library)
    await first.start()
    async with httpx.AsyncClient(base_url=first.base, timeout=30) as client:
        job = (
            await client.post(
                f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["big.gguf"]}
            )
        ).json()
        await wait_bytes(client, job["id"], 64 * 1024)
    first.kill()  # SIGKILL: the store still says `running`
    assert not (library / "acme/tiny/big.gguf").exists()
    hub.rate = None
    second = with_downloads(new_router(tmp_harness), hub, library)
    await second.start()
    async with httpx.AsyncClient(base_url=second.base, timeout=30) as client:
        done = await wait_job(client, job["id"])
    assert done["state"] == "completed", done
    data = hub.repos["acme/tiny"].files["big.gguf"]
    assert (
        hashlib.sha256((library / "acme/tiny/big.gguf").read_bytes()).digest()
        == hashlib.sha256(data).digest()
    )
    assert any(s[4] and s[4].startswith("bytes=") for s in hub.requests_to("cdn"))
    assert library_files(library) == ["acme/tiny/big.gguf"]


async def test_cli_download_follows_the_job_with_a_progress_bar(
    tmp_harness: RouterHarness, hub: FakeHub
) -> None:
    library = tmp_harness.tmp / "library"
    router = with_downloads(new_router(tmp_harness), hub, library)
    await router.start()
    proc = await asyncio.create_subprocess_exec(
        str(CLI),
        "download",
        "acme/tiny",
        "config.json",
        "weights/*.gguf",
        "--url",
        router.base,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().startswith("completed")
    assert "acme/tiny" in err.decode() and "100%" in err.decode()
    assert library_files(library) == ["acme/tiny/config.json", "acme/tiny/weights/model.gguf"]
    proc = await asyncio.create_subprocess_exec(
        str(CLI),
        "download",
        "acme/tiny",
        "../x",
        "--url",
        router.base,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1 and "400" in err.decode()
