"""Issue 33, "where the cache is, placement follows", across real routers: a master and two
slaves (`tensor-router start` processes), both serving `chat` on a fake llama-server that
renders chat templates and answers slot actions, so each slave's conversation library notes
the prompts it serves and reports their prefixes in its snapshot. Three conversations start
where the master's rotation puts them; every returning turn lands on that slave. With the slave
of one conversation kept busy (more than AFFINITY_SLACK relayed requests), the affinity yields
and the usual order sends a returning turn to the idle slave.

Which slave answered is read from what the fakes received (`--record-bodies`, one file, each
line with the fake's pid) and each slave's runtime pid (its `/router/v1/status`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from router.cluster.replicas import AFFINITY_SLACK
from tests.support.cluster import AUTH, Cluster, cluster, listed_ids, start_all
from tests.support.harness import RouterHarness, until

CHAT = "/v1/chat/completions"
SLAVES = ("left", "right")
PIDS: dict[int, str] = {}  # the fake backend's pid -> the slave running it


def _kcpps(h: RouterHarness, name: str) -> Path:
    """`chat.kcpps` of the same bytes on both slaves (one model file): one public model."""
    folder, files = h.tmp / f"kcpps-{name}", h.tmp / "models-shared"
    folder.mkdir()
    files.mkdir(exist_ok=True)
    (files / "chat.gguf").write_bytes(b"GGUF")
    body = {"backend_mode": "llama_sdcpp", "model_param": str(files / "chat.gguf")}
    (folder / "chat.kcpps").write_text(json.dumps(body))
    return folder


def _landed(h: RouterHarness, marker: str) -> list[str]:
    """The slaves whose backend received a chat request carrying `marker`, in order."""
    path = h.tmp / "bodies.jsonl"
    found = []
    for line in path.read_text().splitlines() if path.exists() else []:
        row = json.loads(line)
        if row["path"].endswith("chat/completions") and marker in json.dumps(row["body"]):
            found.append(PIDS.get(row["pid"], "?"))
    return found


@contextlib.asynccontextmanager
async def started(
    c: Cluster, request_s: float
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, httpx.AsyncClient]]]:
    """The cluster started, `chat` listed by the master and both slaves heard from (the list
    shows `chat` once one slave answered; a busy machine can start the other seconds later,
    and the rotation would then put every first turn on one slave): a client of the master
    (`request_s` per request) and one of each slave, by name."""
    await start_all(c)
    async with (
        httpx.AsyncClient(base_url=c.master.base, timeout=request_s) as client,
        httpx.AsyncClient(base_url=c.slaves[0].base, timeout=10) as left,
        httpx.AsyncClient(base_url=c.slaves[1].base, timeout=10) as right,
    ):
        assert await until(lambda: listed_ids(client), ["chat"]), await listed_ids(client)
        await _next_contact(client, 0.0)
        yield client, dict(zip(SLAVES, (left, right), strict=True))


async def _learn_pids(slaves: dict[str, httpx.AsyncClient]) -> None:
    for name, slave in slaves.items():
        for runtime in (await slave.get("/router/v1/status")).json()["runtimes"]:
            if runtime.get("pid"):
                PIDS[int(runtime["pid"])] = name


def _turn(story: str, *more: str) -> list[dict[str, str]]:
    messages = [{"role": "user", "content": f"tell me the story of {story}"}]
    for text in more:
        messages += [{"role": "assistant", "content": "once"}, {"role": "user", "content": text}]
    return messages


async def _ask(client: httpx.AsyncClient, messages: list[dict[str, str]], tokens: int = 1) -> None:
    body = {"model": "chat", "messages": messages, "max_tokens": tokens}
    reply = await client.post(CHAT, json=body)
    assert reply.status_code == 200, reply.text


async def _master_knows(master: httpx.AsyncClient, slave: httpx.AsyncClient, count: int) -> None:
    """Until the slave reports `count` prefixes for `chat`, then until the master heard from
    it twice after that (its second snapshot was made after the first was received)."""

    async def prefixes() -> bool:
        snap = (await slave.get("/router/v1/node/models", headers=AUTH)).json()
        return sum(len(m.get("prefixes", ())) for m in snap["models"]) >= count

    assert await until(prefixes, True)
    seen = time.time()
    for _ in range(2):
        seen = await _next_contact(master, seen)


async def _next_contact(master: httpx.AsyncClient, after: float) -> float:
    contact: list[float] = []

    async def later() -> bool:
        nodes = (await master.get("/router/v1/site/inventory")).json()["nodes"]
        times = [n["last_contact"] for n in nodes if n["role"] == "slave" and n["last_contact"]]
        contact[:] = [min(times)] if len(times) == len(SLAVES) else []
        return bool(contact) and contact[0] > after

    assert await until(later, True)
    return contact[0]


async def test_returning_turns_land_where_their_prefix_is_until_that_slave_is_busy(
    tmp_harness: RouterHarness,
) -> None:
    h = tmp_harness
    bodies = h.tmp / "bodies.jsonl"
    h.faults["llamacpp"] = (
        f"--slot-actions --apply-template --token-rate 10 --record-bodies {bodies}"
    )
    c = cluster(h, {}, {}, {}, slave_kcpps=[_kcpps(h, name) for name in SLAVES])
    async with started(c, request_s=60) as (client, slaves):
        left, right = slaves.values()
        stories = ("the mill", "the lighthouse", "the orchard")
        for story in stories:  # first turns: where the rotation puts them
            await _ask(client, _turn(story))
        await _learn_pids(slaves)
        home = {s: _landed(h, f"story of {s}") for s in stories}
        assert sorted(len(v) for v in home.values()) == [1, 1, 1], home
        await _master_knows(client, left, 1)
        await _master_knows(client, right, 1)

        said: tuple[str, ...] = ()
        for turn in ("and then?", "what next?"):  # six returning turns, each to its home
            said = (*said, turn)
            for story in stories:
                await _ask(client, _turn(story, *said))
        for story in stories:
            assert _landed(h, f"story of {story}") == home[story] * 3, story

        await _yields(h, client, slaves, _turn(stories[0], *said), home[stories[0]][0])


async def _load(slave: httpx.AsyncClient) -> int:
    status = (await slave.get("/router/v1/status")).json()
    running = sum(int(r.get("in_flight") or 0) for r in status["runtimes"])
    return running + sum(int(n) for n in status["queued"].values())


async def _yields(
    h: RouterHarness,
    client: httpx.AsyncClient,
    slaves: dict[str, httpx.AsyncClient],
    story: list[dict[str, str]],
    busy_at: str,
) -> None:
    """Keep the conversation's slave busy with AFFINITY_SLACK + 1 long relayed answers (the
    same returning turn: affinity puts each there), then one more returning turn: the usual
    rotation decides. Three first turns took rotation places 0, 1, 2, so place 3 is the slave
    that is not this conversation's (the first and third stories share a slave)."""
    (idle,) = set(SLAVES) - {busy_at}
    long_turn = [*story, {"role": "assistant", "content": "once"}]
    long_turn.append({"role": "user", "content": "tell it all"})
    busy = [
        asyncio.create_task(_ask(client, long_turn, tokens=300)) for _ in range(AFFINITY_SLACK + 1)
    ]
    try:

        async def all_there() -> bool:  # relayed, so counted by the master until they end
            return await _load(slaves[busy_at]) >= AFFINITY_SLACK + 1

        assert await until(all_there, True)
        marker = json.dumps(long_turn[0]["content"])[1:-1]
        before = _landed(h, marker)
        await _ask(client, [*long_turn, {"role": "assistant", "content": "x"}, _user("more")])
        assert _landed(h, marker)[len(before) :] == [idle]
    finally:
        for task in busy:
            task.cancel()
        await asyncio.gather(*busy, return_exceptions=True)


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
