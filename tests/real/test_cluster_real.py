"""A chat request through the master, answered by the real llama-server behind a slave."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI

from router.demo_models import write_text_kcpps
from tests.real.router_fixtures import LLAMA_ARGS
from tests.support.cluster import cluster, listed_ids, served_models, start_all
from tests.support.harness import RouterHarness, until

pytestmark = [pytest.mark.real, pytest.mark.timeout(120)]


async def test_master_relays_to_llama_server_behind_a_slave(
    tmp_harness: RouterHarness, demo_text: dict[str, Path], llama_server_bin: Path
) -> None:
    slave_dir = tmp_harness.tmp / "kcpps-real-slave"
    slave_dir.mkdir()
    write_text_kcpps(slave_dir, demo_text)
    llama = {"llama": {"binary_path": str(llama_server_bin), "extra_args": LLAMA_ARGS}}
    c = cluster(tmp_harness, {}, {}, slave_sections=llama, slave_kcpps=[slave_dir])
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as probe:
        assert await until(lambda: listed_ids(probe), ["chat-a", "chat-b", "embed"])
    client = AsyncOpenAI(
        base_url=c.master.base + "/v1", api_key="unused", max_retries=0, timeout=90
    )
    messages = [{"role": "user", "content": "Hello"}]
    done = await client.chat.completions.create(
        model="chat-a",
        messages=messages,
        max_tokens=6,
        temperature=0,
        seed=1,  # type: ignore[arg-type]
    )
    assert done.model == "chat-a" and done.usage is not None and done.usage.completion_tokens > 0
    stream = await client.chat.completions.create(
        model="chat-a",
        messages=messages,
        max_tokens=6,
        temperature=0,
        seed=1,
        stream=True,  # type: ignore[arg-type]
    )
    chunks = [chunk async for chunk in stream]
    assert chunks and {ch.model for ch in chunks} == {"chat-a"}
    assert any(ch.choices and ch.choices[0].delta.content for ch in chunks)
    await client.close()
    assert await until(lambda: served_models(c.slaves[0]), ["chat-a"])
    assert await served_models(c.master) == []
