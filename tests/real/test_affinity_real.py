"""Issue 33, "where the cache is, placement follows", with the real llama-server: a master and
two slaves (`tensor-router start` processes), each serving `chat` (the demo chat-a file, the
conversation library on) on its own real llama-server. Three conversations of about 1,130
tokens start where the master's rotation puts them; each of the six returning turns lands on
the slave that holds its prefix, with >= 90 % of its prompt cached (the usage's
`cached_tokens`, relayed by the master). With that slave kept busy (more than AFFINITY_SLACK
relayed long answers), the affinity yields and a returning turn goes to the idle slave.

Where a turn landed is read from the slaves' own snapshots: the library reports the prefix of
the prompt its runtime served (`<units>:<digest>`, router/conversations), so the slave that
reports a turn's full digest chain served it (tests/cluster/test_affinity_cluster.py runs the
same on fake backends).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.cluster.replicas import AFFINITY_SLACK
from router.conversations import parse
from tests.cluster.test_affinity_cluster import SLAVES, _load, _master_knows, started
from tests.real.router_fixtures import LLAMA_ARGS
from tests.real.test_conversation_library_real import _history
from tests.real.test_kv_persist_real import _cached
from tests.support.cluster import AUTH, cluster
from tests.support.harness import RouterHarness, until

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]

CHAT = "/v1/chat/completions"
GEN = {"max_tokens": 4, "temperature": 0, "seed": 42}
Messages = list[dict[str, str]]


def _kcpps(h: RouterHarness, name: str, model: Path) -> Path:
    """`chat.kcpps` of the same bytes on both slaves (one model file): one public model."""
    folder = h.tmp / f"kcpps-{name}"
    folder.mkdir()
    body = {
        "backend_mode": "llama_sdcpp",
        "model_param": str(model),
        "contextsize": 2048,
        "router_kv_persist": "on",
    }
    (folder / "chat.kcpps").write_text(json.dumps(body))
    return folder


async def _ask(client: httpx.AsyncClient, messages: Messages, **more: Any) -> dict[str, Any]:
    reply = await client.post(CHAT, json={"model": "chat", "messages": messages, **GEN, **more})
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def _next(messages: Messages, reply: dict[str, Any], text: str) -> Messages:
    said = reply["choices"][0]["message"]["content"]
    return [*messages, {"role": "assistant", "content": said}, {"role": "user", "content": text}]


async def _holders(slaves: dict[str, httpx.AsyncClient], messages: Messages) -> list[str]:
    """The slaves whose library reports this very prompt (the one their runtime served)."""
    prompt = parse(CHAT, json.dumps({"messages": messages}).encode())
    assert prompt is not None
    entry = f"{len(prompt.chain)}:{prompt.chain[-1]}"
    found = []
    for name, slave in slaves.items():
        snap = (await slave.get("/router/v1/node/models", headers=AUTH)).json()
        if any(entry in m.get("prefixes", ()) for m in snap["models"]):
            found.append(name)
    return found


async def test_returning_turns_land_cached_where_their_prefix_is_until_that_slave_is_busy(
    tmp_harness: RouterHarness, demo_text: dict[str, Path], llama_server_bin: Path
) -> None:
    h = tmp_harness
    llama = {"llama": {"binary_path": str(llama_server_bin), "extra_args": LLAMA_ARGS}}
    folders = [_kcpps(h, name, demo_text["chat-a"]) for name in SLAVES]
    c = cluster(h, {}, {}, {}, slave_sections=llama, slave_kcpps=folders)
    async with started(c, request_s=120) as (client, slaves):
        left, right = slaves.values()
        convs = {tag: _history(tag) for tag in "XYZ"}
        replies = {tag: await _ask(client, m) for tag, m in convs.items()}  # by rotation
        home = {tag: await _holders(slaves, m) for tag, m in convs.items()}
        assert all(len(v) == 1 for v in home.values()), home  # each served once
        assert {v[0] for v in home.values()} == set(SLAVES), home  # on both
        await _master_knows(client, left, 1)
        await _master_knows(client, right, 1)

        for text in ("go on", "and then?"):  # six returning turns, each to its home, cached
            for tag in "XYZ":
                convs[tag] = _next(convs[tag], replies[tag], text)
                replies[tag] = await _ask(client, convs[tag])
                prompt_tokens = int(replies[tag]["usage"]["prompt_tokens"])
                assert _cached(replies[tag]) >= 0.9 * prompt_tokens, (tag, replies[tag]["usage"])
                assert await _holders(slaves, convs[tag]) == home[tag], (tag, text)

        await _yields(client, slaves, _next(convs["X"], replies["X"], "tell it all"), home["X"])


async def _yields(
    client: httpx.AsyncClient,
    slaves: dict[str, httpx.AsyncClient],
    turn: Messages,
    home: list[str],
) -> None:
    """Keep the conversation's slave busy with AFFINITY_SLACK + 1 long answers of its next
    turn (affinity puts each there, the last at 0 + AFFINITY_SLACK; one slot, so they queue
    for seconds: 600 tokens each, past the end of text), then one more returning turn: it
    goes to the idle slave."""
    (busy_at,) = home
    (idle,) = set(SLAVES) - {busy_at}
    long = {"max_tokens": 600, "ignore_eos": True}
    busy = [asyncio.create_task(_ask(client, turn, **long)) for _ in range(AFFINITY_SLACK + 1)]
    try:

        async def all_there() -> bool:  # relayed, so counted by the master until they end
            return await _load(slaves[busy_at]) >= AFFINITY_SLACK + 1

        assert await until(all_there, True)
        moved = [*turn, {"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}]
        await _ask(client, moved)
        assert await _holders(slaves, moved) == [idle]
    finally:
        for task in busy:
            task.cancel()
        await asyncio.gather(*busy, return_exceptions=True)
