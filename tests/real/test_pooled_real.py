"""Pooled memory end to end (docs/cluster.md, "Pooled memory"): a master whose memory budget
holds one layer of the demo model, a slave lending over llama.cpp's real RPC server, the
real llama-server on the master with `--rpc`. The model answers through the master with the
same greedy text and top-3 logprobs as the same file on the master alone; while loaded the
slave runs exactly one RPC server; after the unload none runs and no port of the range is
open."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.cluster.pooled.ports import open_ports
from tests.real.router_fixtures import LLAMA_ARGS
from tests.support.harness import RouterHarness, until
from tests.support.pooled import port_range, rpc_servers, s1_available, spread_pair
from tests.support.router_process import RouterProcess

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]
PROMPT = {"prompt": "Hello there", "max_tokens": 8, "temperature": 0, "logprobs": 3, "seed": 1}


def _llama(binary: Path) -> dict[str, Any]:
    return {"binary_path": str(binary), "extra_args": LLAMA_ARGS}


def _top3(answer: dict[str, Any]) -> list[list[tuple[str, float]]]:
    content = answer["choices"][0]["logprobs"]["content"]
    return [[(t["token"], t["logprob"]) for t in step["top_logprobs"]] for step in content]


async def _complete(client: httpx.AsyncClient, model: str) -> dict[str, Any]:
    reply = await client.post("/v1/completions", json={**PROMPT, "model": model})
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


async def _started_pair(
    h: RouterHarness, demo_text: dict[str, Path], llama_server_bin: Path
) -> tuple[RouterProcess, RouterProcess, tuple[int, int]]:
    """A master and its lending node s1, both started, with the node's RPC port range."""
    ports = port_range()
    master, slave = spread_pair(h, demo_text["chat-a"], ports, llama=_llama(llama_server_bin))
    await slave.start()
    await master.start()
    return master, slave, ports


async def test_a_model_spread_over_a_lending_node_answers_as_on_one_box(
    tmp_harness: RouterHarness, demo_text: dict[str, Path], llama_server_bin: Path
) -> None:
    master, slave, ports = await _started_pair(tmp_harness, demo_text, llama_server_bin)
    async with httpx.AsyncClient(base_url=master.base, timeout=120) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        dry = await client.post("/router/v1/load", json={"model": "spread", "dry_run": True})
        assert dry.status_code == 200, dry.text
        plan = dry.json()["pooled"]
        assert [n["node_id"] for n in plan["nodes"]] == ["s1"] and plan["nodes"][0]["bytes"] > 0
        assert plan["host_layers"] == 1 and rpc_servers(slave) == []  # a dry run leases nothing

        solo = await _complete(client, "solo")
        spread = await _complete(client, "spread")
        assert spread["choices"][0]["text"] == solo["choices"][0]["text"]
        for ours, theirs in zip(_top3(spread), _top3(solo), strict=True):
            assert [t for t, _ in ours] == [t for t, _ in theirs]
            assert all(
                math.isclose(a, b, abs_tol=1e-3)
                for (_, a), (_, b) in zip(ours, theirs, strict=True)
            )

        servers = rpc_servers(slave)
        assert len(servers) == 1 and rpc_servers(master) == []
        status = (await client.get("/router/v1/status")).json()
        (device,) = status["remote_devices"]
        assert device["node_id"] == "s1" and device["device"].startswith("RPC0[127.0.0.1:")
        argv = json.dumps(status["runtimes"])
        assert "spread" in argv

        unloaded = await client.post("/router/v1/unload", json={"target": "all"})
        assert unloaded.status_code == 200, unloaded.text

        async def none_left() -> bool:
            return rpc_servers(slave) == [] and open_ports(*ports) == []

        assert await until(none_left, True, deadline=30)
        status = (await client.get("/router/v1/status")).json()
        assert status["remote_devices"] == []


async def test_a_lending_node_killed_mid_stream_ends_the_stream_and_the_master_recovers(
    tmp_harness: RouterHarness, demo_text: dict[str, Path], llama_server_bin: Path
) -> None:
    master, slave, ports = await _started_pair(tmp_harness, demo_text, llama_server_bin)
    body = {"model": "spread", "prompt": "Once", "max_tokens": 400, "temperature": 0}
    async with httpx.AsyncClient(base_url=master.base, timeout=120) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            first = await anext(lines)
            while not first.startswith("data:"):
                first = await anext(lines)
            slave.kill()  # its RPC server dies with it (the supervisor's death signal)
            rest = [line async for line in lines]
        data = [line for line in rest if line.startswith("data:")]
        assert "data: [DONE]" not in data and data and "error" in data[-1], rest[-4:]

        async def refused() -> int:
            reply = await client.post("/v1/completions", json={**body, "max_tokens": 4})
            return reply.status_code if "s1" in reply.text else -reply.status_code

        assert await until(refused, 503, deadline=30)  # names the missing node
        await slave.start()
        assert await until(lambda: s1_available(client), True, deadline=30)
        again = await client.post("/v1/completions", json={**body, "max_tokens": 4})
        assert again.status_code == 200, again.text
        assert len(rpc_servers(slave)) == 1
