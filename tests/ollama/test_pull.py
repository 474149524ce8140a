"""`/api/pull` of `hf.co/{owner}/{repo}:{quant}` (issue 23): a real download through the
downloads service from a local fake hub, Ollama's progress records read by the official
`ollama` client, a .kcpps written for the file and the model served right after."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator

import ollama
import pytest

from router.config import Settings
from router.downloads.plan import RepoFile
from router.errors import BadRequest
from router.ollama import pull as pl
from tests.fakes.fake_hub import COMMIT, FakeHub, FakeRepo
from tests.support.download_helpers import download_settings
from tests.support.harness import RouterHarness
from tests.support.ollama import client_for

Q4 = b"GGUF" + bytes(range(256)) * 1024  # 256 KiB: paced by the hub, so progress moves
Q8 = b"GGUF" + b"q8" * 1000


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    """The fake hub with a GGUF repository of two quantizations and a projector."""
    hub = FakeHub()
    hub.repos["acme/Qwen-GGUF"] = FakeRepo(
        "acme/Qwen-GGUF",
        COMMIT,
        {
            "Qwen-Q4_K_M.gguf": Q4,
            "Qwen-Q8_0.gguf": Q8,
            "mmproj-Qwen-f16.gguf": b"GGUF",
            "README.md": b"# qwen\n",
        },
        {"Qwen-Q4_K_M.gguf", "Qwen-Q8_0.gguf", "mmproj-Qwen-f16.gguf"},
    )
    hub.rate = 256 * 1024  # about a second for the Q4 file
    await hub.start()
    try:
        yield hub
    finally:
        await hub.close()


# ---- pure ------------------------------------------------------------------------------


def test_pull_names() -> None:
    assert pl.parse_pull_name("hf.co/acme/Qwen-GGUF:Q4_K_M") == pl.PullName(
        "acme/Qwen-GGUF", "Q4_K_M"
    )
    assert pl.parse_pull_name("huggingface.co/acme/x:latest") == pl.PullName("acme/x", None)
    assert pl.parse_pull_name("hf.co/acme/Qwen-GGUF:Q8_0").config_id == "Qwen-GGUF-Q8_0"
    for bad in ("llama3.2", "hf.co/acme", "hf.co/../x:Q4", "hf.co/a/b/c", "hf.co/a/b:Q4 K", "", 3):
        with pytest.raises(BadRequest) as caught:
            pl.parse_pull_name(bad)
        assert "hf.co/" in caught.value.message or "quantization" in caught.value.message


def test_pull_file_choice() -> None:
    files = [
        RepoFile(p, 10)
        for p in (
            "m-Q4_K_M.gguf",
            "m-Q8_0.gguf",
            "mmproj-m-Q4_K_M.gguf",
            "big/m-Q6_K-00001-of-00002.gguf",
            "big/m-Q6_K-00002-of-00002.gguf",
        )
    ]
    pick = pl.choose_files
    assert [f.path for f in pick(files, pl.PullName("a/m", None))] == ["m-Q4_K_M.gguf"]
    assert [f.path for f in pick(files, pl.PullName("a/m", "q8_0"))] == ["m-Q8_0.gguf"]
    split = pick(files, pl.PullName("a/m", "Q6_K"))
    assert len(split) == 2 and pl.first_part(split).path.endswith("00001-of-00002.gguf")
    with pytest.raises(BadRequest, match="Q4_K_M, Q6_K, Q8_0"):
        pick(files, pl.PullName("a/m", "IQ2_XS"))


# ---- through the router ------------------------------------------------------------------


async def test_pull_downloads_writes_a_config_and_serves(
    harness: RouterHarness, hub: FakeHub
) -> None:
    await harness.start(download_settings(harness, hub))
    client = client_for(harness)
    records = [r async for r in await client.pull("hf.co/acme/Qwen-GGUF:Q4_K_M", stream=True)]
    statuses = [r.status for r in records]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    digest = hashlib.sha256(Q4).hexdigest()
    layer = [r for r in records if r.digest == f"sha256:{digest}"]
    assert layer and all(r.total == len(Q4) for r in layer)
    assert layer[-1].completed == len(Q4) and len({r.completed for r in layer}) >= 2
    assert "verifying sha256 digest" in statuses and "writing manifest" in statuses
    # The file is in the library, the .kcpps names it, and the model is listed and served.
    target = harness.tmp / "library" / "acme" / "Qwen-GGUF" / "Qwen-Q4_K_M.gguf"
    assert target.read_bytes() == Q4
    config = json.loads((harness.kcpps_dir / "Qwen-GGUF-Q4_K_M.kcpps").read_text())
    assert config == {"model_param": str(target.resolve())}
    assert "Qwen-GGUF-Q4_K_M" in [m.model for m in (await client.list()).models]
    reply = await client.generate(model="Qwen-GGUF-Q4_K_M", prompt="hi")
    assert reply.response
    # A second pull finds the file in the library: success again, nothing downloaded.
    again = await client.pull("hf.co/acme/Qwen-GGUF:Q4_K_M")
    assert again.status == "success"
    assert len([s for s in hub.seen if s[2].endswith("Qwen-Q4_K_M.gguf")]) == 1


async def test_pull_refusals_say_what_can_be_pulled(harness: RouterHarness, hub: FakeHub) -> None:
    await harness.start(download_settings(harness, hub))
    client = client_for(harness)
    cases = {
        "llama3.2": (400, "hf.co/{owner}/{repository}"),
        "hf.co/acme/Qwen-GGUF:IQ1_S": (400, "Q4_K_M, Q8_0"),
        "hf.co/acme/none:Q4_K_M": (404, "acme/none"),
    }
    for name, (status, said) in cases.items():
        with pytest.raises(ollama.ResponseError) as caught:
            await client.pull(name)
        assert caught.value.status_code == status and said in caught.value.error, name
    assert list(harness.kcpps_dir.iterdir()) == []


async def test_a_failed_download_ends_the_stream_with_an_error(
    harness: RouterHarness, hub: FakeHub
) -> None:
    hub.wrong_bytes.add("Qwen-Q8_0.gguf")
    await harness.start(download_settings(harness, hub))
    stream = await client_for(harness).pull("hf.co/acme/Qwen-GGUF:Q8_0", stream=True)
    seen: list[str | None] = []
    with pytest.raises(ollama.ResponseError) as caught:
        async for record in stream:
            seen.append(record.status)
    assert seen[0] == "pulling manifest" and "success" not in seen
    assert "failed" in caught.value.error
    assert not (harness.kcpps_dir / "Qwen-GGUF-Q8_0.kcpps").exists()


async def test_a_second_pull_of_a_file_being_pulled_is_a_409(
    harness: RouterHarness, hub: FakeHub
) -> None:
    await harness.start(download_settings(harness, hub))
    client = client_for(harness)
    first = await client.pull("hf.co/acme/Qwen-GGUF:Q4_K_M", stream=True)
    assert (await anext(first)).status == "pulling manifest"
    with pytest.raises(ollama.ResponseError) as caught:
        await client.pull("hf.co/acme/Qwen-GGUF:Q4_K_M")
    assert caught.value.status_code == 409 and "Qwen-Q4_K_M.gguf" in caught.value.error
    assert [r.status async for r in first][-1] == "success"


# ---- issue 36: a served model, and a hub that cannot be reached ------------------------------


@pytest.mark.parametrize("name", ["m", "m:latest", "gpt-4o-mini"])
async def test_pulling_a_served_model_is_a_success(harness: RouterHarness, name: str) -> None:
    """Ollama answers success for a model it has; without the downloads service too."""
    harness.model("m", router_aliases=["gpt-4o-mini"])
    client = await harness.start()
    whole = await client.post("/api/pull", json={"model": name, "stream": False})
    assert whole.status_code == 200 and whole.json() == {"status": "success"}
    records = [r async for r in await client_for(harness).pull(name, stream=True)]
    assert [r.status for r in records][0] == "pulling manifest"
    assert records[-1].status == "success"
    assert sorted(p.name for p in harness.kcpps_dir.iterdir()) == ["m.kcpps"]  # nothing written


def _endpoint(harness: RouterHarness, hub: FakeHub, endpoint: str) -> Settings:
    settings = download_settings(harness, hub)
    section = settings.downloads.model_copy(update={"endpoint": endpoint})
    return settings.model_copy(update={"downloads": section})


async def test_an_offline_hub_is_a_502_saying_it_cannot_be_reached(
    harness: RouterHarness, hub: FakeHub
) -> None:
    """A name that does not resolve is a network failure (502), not an S22 refusal (403)."""
    client = await harness.start(_endpoint(harness, hub, "https://hub.invalid"))
    r = await client.post("/api/pull", json={"model": "hf.co/acme/Qwen-GGUF:Q4_K_M"})
    assert r.status_code == 502, r.text
    assert set(r.json()) == {"error"}  # Ollama's error shape
    assert "cannot reach hub.invalid" in r.json()["error"]
    # The router's own download API shares the hub code: the same answer in its own shape.
    own = await client.post(
        "/router/v1/site/download/repository", json={"repository": "acme/Qwen-GGUF"}
    )
    assert own.status_code == 502 and "cannot reach hub.invalid" in own.text, own.text
    assert own.json()["error"]["code"] == "hub_unreachable"


async def test_an_s22_refusal_stays_a_403(harness: RouterHarness, hub: FakeHub) -> None:
    """Plain http off loopback is refused before anything is sent: still a 403."""
    client = await harness.start(_endpoint(harness, hub, "http://192.0.2.1"))
    r = await client.post("/api/pull", json={"model": "hf.co/acme/Qwen-GGUF:Q4_K_M"})
    assert r.status_code == 403 and "refused" in r.json()["error"], r.text
