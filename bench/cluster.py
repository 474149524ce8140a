"""P-cluster: what the master's hop costs, and what the registry's choices cost.

Arms over one upstream process (bench/upstream.py, launched by the slave): `direct` (the
backend), `slave` (slave -> backend) and `master` (master -> slave -> backend). Reported as
ratios from one run: the master's added p50 over the slave's added p50 (target <= 2), and
tokens/s with 64 paced streams, master over slave (target >= 0.97). Then, in process: the cost
of one replica choice with 50 nodes x 200 models in the registry (target < 50 us), and one poll
round of 50 nodes (answered by one local server on 50 ports) against `health_interval`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from bench import common as c
from bench.streams import block

PATH = "/v1/chat/completions"
TOKEN = "bench-cluster-token-0123456789abcdef"
NODES, MODELS = 50, 200


def _yaml(cluster: dict[str, Any]) -> str:
    return "cluster: " + json.dumps({**cluster, "token": TOKEN}) + "\n"


def start_cluster(stack: c.Stack, wd: Path, mode: str) -> dict[str, str]:
    model = wd / "fast.gguf"
    model.write_bytes(b"GGUF-bench")
    wrapper = c.write_wrapper(wd / f"upstream-{mode}", mode)
    master_port, slave_port = c.free_port(), c.free_port()
    master_url, slave_url = f"http://127.0.0.1:{master_port}", f"http://127.0.0.1:{slave_port}"
    slave = c.Router(wd / "slave", {"fast": model}, wrapper, port=slave_port, max_per_peer=1024)
    slave.extra_yaml = _yaml(
        {
            "role": "slave",
            "node_id": "slave",
            "public_url": slave_url,
            "master_url": master_url,
            "sync_interval": "1s",
        }
    )
    master = c.Router(wd / "master", {}, wrapper, port=master_port, max_per_peer=1024)
    master.extra_yaml = _yaml(
        {"role": "master", "node_id": "master", "slave_urls": [slave_url], "health_interval": "1s"}
    )
    for router in (master, slave):
        stack.callback(router.stop)
        router.start()
    slave.load("fast")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, body, _ = c.http_json("GET", f"{master_url}/v1/models")
        if any(m.get("id") == "fast" for m in (body or {}).get("data", [])):
            break
        time.sleep(0.2)
    rt = slave.backend("fast")
    return {"direct": f"http://127.0.0.1:{rt['port']}", "slave": slave_url, "master": master_url}


def hop(opts: c.Opts) -> dict[str, Any]:
    mode = "nginx" if c.nginx_path() else "stream"
    with c.workdir("cluster") as wd, c.Stack() as stack:
        urls = start_cluster(stack, wd, mode)
        names = list(urls)
        for arm in names:
            c.load_test(urls[arm] + PATH, c.CHAT_BODY, 1, 1)

        def run(arm: str, rep: int) -> dict[str, Any]:
            return c.load_test(urls[arm] + PATH, c.CHAT_BODY, 1, opts.block)

        latency = c.interleave(names, opts.reps, run)
    with c.workdir("cluster-streams") as wd, c.Stack() as stack:
        urls = start_cluster(stack, wd, "stream")
        seconds = max(opts.block, 2.0 if opts.quick else 5.0)

        def streams(arm: str, rep: int) -> dict[str, Any]:
            return asyncio.run(block(urls[arm] + PATH, 64, 50, 200, 50, seconds))

        streamed = c.interleave(["slave", "master"], opts.reps, streams)
    added = {a: c.per_rep(latency, a, "direct", "p50_ms", c.diff) for a in ("slave", "master")}
    return {
        "upstream": mode,
        "client": c.client_name(),
        "added_p50_ms": added,
        "master_added_over_slave_added": _added_ratio(latency),
        "tok_s_64_streams": {a: c.med([r["tok_s"] for r in streamed[a]]) for a in streamed},
        "tok_s_ratio_master_over_slave": c.per_rep(streamed, "master", "slave", "tok_s", c.ratio),
        "errors_64_streams": {a: sum(r["errors"] for r in streamed[a]) for a in streamed},
    }


def _added_ratio(latency: dict[str, list[dict[str, Any]]]) -> float | None:
    """Per repetition: (master p50 - direct p50) / (slave p50 - direct p50); the median."""
    vals = []
    for m, s, d in zip(latency["master"], latency["slave"], latency["direct"], strict=False):
        slave_added = s["p50_ms"] - d["p50_ms"]
        if slave_added > 0:
            vals.append((m["p50_ms"] - d["p50_ms"]) / slave_added)
    return c.med(vals)


def _registry(nodes: int, models: int) -> Any:
    from router.cluster import PROTOCOL_VERSION, NodeModel, Registry, Snapshot

    urls = [f"http://10.0.0.{i}:8080" for i in range(1, nodes + 1)]
    registry = Registry("master", None, tuple(urls))
    rng = random.Random(7)
    for i, url in enumerate(urls):
        records = tuple(
            NodeModel(
                local_id=f"model-{m}",
                model_hash=f"h{m % 50}",
                config_hash="c",
                loaded=rng.random() < 0.1,
            )
            for m in rng.sample(range(models * 2), models)
        )
        snap = Snapshot(protocol=PROTOCOL_VERSION, node_id=f"n{i}", node_url=url, models=records)
        registry.register(snap, time.time())
    return registry


def choice_cost(n: int = 20000) -> dict[str, Any]:
    """One request's replica choice as the relay makes it (`ClusterService.find` + `target`),
    the merged view already built (it is rebuilt off the request path when the registry
    changes)."""
    from router.cluster import AllowList, ClusterService, NodeClient
    from router.config.schema import ClusterSection

    settings = ClusterSection(role="master", node_id="master", token=TOKEN)
    client = NodeClient(None, TOKEN, AllowList(), 30.0)  # type: ignore[arg-type]  # never called
    service = ClusterService(settings, client, lambda: (), lambda _: None)
    service.registry = _registry(NODES, MODELS)
    started = time.perf_counter()
    merged = service.public_models()
    merge_ms = (time.perf_counter() - started) * 1000
    ids = [m.public_id for m in merged]
    rng = random.Random(3)
    picks = [rng.choice(ids) for _ in range(n)]
    started = time.perf_counter_ns()
    for public_id in picks:
        public = service.find(public_id)
        assert public is not None
        service.target(public, local_busy=False)
    per_choice_us = (time.perf_counter_ns() - started) / n / 1000
    replicas = sum(len(m.replicas) for m in merged) / len(merged)
    return {
        "nodes": NODES,
        "models_per_node": MODELS,
        "public_models": len(merged),
        "mean_replicas": round(replicas, 1),
        "merge_ms": round(merge_ms, 1),
        "choice_us": round(per_choice_us, 2),
    }


async def poll_round(nodes: int = NODES) -> dict[str, Any]:
    """One master poll of `nodes` slaves (one aiohttp app on `nodes` ports, 200 models each)."""
    import aiohttp
    from aiohttp import web

    from router.cluster import AllowList, ClusterService, NodeClient
    from router.config.schema import ClusterSection

    ports = [c.free_port() for _ in range(nodes)]
    models = [
        {"local_id": f"model-{m}", "model_hash": "h", "config_hash": "c"} for m in range(MODELS)
    ]

    async def snapshot(request: web.Request) -> web.Response:
        port = request.url.port
        return web.json_response(
            {
                "protocol": 1,
                "node_id": f"n{port}",
                "node_url": f"http://127.0.0.1:{port}",
                "models": models,
            }
        )

    app = web.Application()
    app.router.add_get("/router/v1/node/models", snapshot)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for port in ports:
        await web.TCPSite(runner, "127.0.0.1", port).start()
    urls = tuple(f"http://127.0.0.1:{p}" for p in ports)
    settings = ClusterSection(role="master", node_id="master", slave_urls=urls, token=TOKEN)
    rounds = []
    async with aiohttp.ClientSession() as session:
        service = ClusterService(
            settings, NodeClient(session, TOKEN, AllowList(), 30.0), lambda: (), lambda _: None
        )
        for _ in range(5):
            started = time.perf_counter()
            await service.poll_once()
            rounds.append((time.perf_counter() - started) * 1000)
        healthy = sum(e.healthy for e in service.registry.nodes())
    await runner.cleanup()
    return {
        "nodes": nodes,
        "round_ms": c.med(rounds),
        "healthy": healthy,
        "health_interval_ms": settings.health_interval * 1000,
        "sync_concurrency": settings.sync_concurrency,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    c.log("cluster: master -> slave -> backend against slave -> backend")
    data = {"hop": hop(opts), "choice": choice_cost(), "poll": asyncio.run(poll_round())}
    c.save(opts, "cluster", data)
    return data


if __name__ == "__main__":
    main()
