"""Issue 34 through the routers: the arm of bench/pooled.py that goes through a master router
(`router_rpc_nodes`) and a lending node router, both `tensor-router start` on this machine's
loopback, with the real llama-server and RPC server they run.

The master's kcpps folder holds the same model twice: `one` (on the master alone) and
`spread` (`router_rpc_nodes: ["s1"]`), under the default `residency: memory` in two
configurations of the master: first a host budget that holds all but two of the model's
layers, so the master leases the rest from node s1; then, restarted, the machine's memory as
the budget, for `one` (the first budget refuses the whole model as `model_too_large`).
Reported: decode tokens/s of each (`timings.predicted_per_second` of llama-server's
`/completion`, through the master) and the bytes the first and second load of `spread` sent
to the node, read from the master's load capture (`pooled.bytes_sent`): the figure a user
sees, not the bench's own `ss` reading.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench import common as c
from router.cluster.pooled.borrower import layer_bytes
from router.memory.shape import read_shape

TOKEN = "bench-pooled-token-0123456789abcdef"
CONTEXT = 512
DECODE = {"prompt": "Once upon a time", "n_predict": 64, "temperature": 0, "ignore_eos": True}


def _yaml(sections: dict[str, Any]) -> str:
    return "".join(f"{name}: {json.dumps(value)}\n" for name, value in sections.items())


def _start(stack: c.Stack, wd: Path, llama: str, model: Path) -> c.Router:
    """Node s1 lending, then the master; returns the master once s1 is available to it."""
    shape = read_shape(str(model))
    assert shape is not None
    layers, size = layer_bytes(shape, CONTEXT)
    master_port, node_port = c.free_port(), c.free_port()
    master_url, node_url = f"http://127.0.0.1:{master_port}", f"http://127.0.0.1:{node_port}"
    rpc_low = c.free_port()
    node = c.Router(wd / "s1", {}, Path(llama), port=node_port)
    node.extra_yaml = _yaml(
        {
            "pooled": {"lend": True, "port_min": rpc_low, "port_max": rpc_low + 3, "threads": 1},
            "cluster": {"role": "slave", "node_id": "s1", "public_url": node_url, "token": TOKEN}
            | {"master_url": master_url, "sync_interval": "1s"},
        }
    )
    kcpps = {"contextsize": CONTEXT, "threads": 1}
    master = c.Router(
        wd / "master",
        {"one": model, "spread": model},
        Path(llama),
        port=master_port,
        analytics=True,
        analytics_keys="load_capture_enabled: true",
        extra_kcpps={"one": kcpps, "spread": kcpps | {"router_rpc_nodes": ["s1"]}},
    )
    cluster = {"role": "master", "node_id": "m", "slave_urls": [node_url], "token": TOKEN}
    # All but two layers fit the master: the rest goes to s1 (half a layer to spare).
    budget = (layers - 2) * size + size // 2
    master.extra_yaml = _yaml({"memory": {"host_budget": budget}, "cluster": cluster})
    for router in (node, master):
        stack.callback(router.stop)
        router.start()
    _until_available(master.url)
    return master


def _whole_model_fits(master: c.Router) -> None:
    """Restart the master without its spreading budget (the machine's memory is the budget
    then), so `one`, the whole model on one box, passes `residency: memory` admission."""
    master.stop()
    master.extra_yaml = "".join(
        line + "\n" for line in master.extra_yaml.splitlines() if not line.startswith("memory:")
    )
    master.start()


def _until_available(url: str, bound: float = 60.0) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        _, body, _ = c.http_json("GET", f"{url}/router/v1/site/inventory")
        nodes = body.get("nodes", []) if isinstance(body, dict) else []
        if any(n.get("node_id") == "s1" and n.get("available") for n in nodes):
            return
        time.sleep(0.5)
    raise RuntimeError("the lending node s1 did not become available to the master")


def _decode_rate(url: str, model: str) -> float:
    status, body, _ = c.http_json("POST", url + "/completion", {**DECODE, "model": model}, 600)
    if status != 200:
        raise RuntimeError(f"decode of {model} failed: {status} {body}")
    return float(body["timings"]["predicted_per_second"])


def _captured_bytes(url: str) -> list[int | None]:
    """The bytes each successful load of `spread` sent, oldest first, from the captures."""
    _, body, _ = c.http_json("GET", f"{url}/router/v1/site/load-captures?node=m")
    rows = [
        row
        for row in (body.get("captures", []) if isinstance(body, dict) else [])
        if row.get("model") == "spread" and row.get("status") == "ok"
    ]
    rows.sort(key=lambda row: float(row["started_at"]))
    return [(row.get("pooled") or {}).get("bytes_sent") for row in rows]


def through_routers(wd: Path, llama: str, model: Path, opts: c.Opts) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"one": [], "spread": []}
    with c.Stack() as stack:
        master = _start(stack, wd, llama, model)
        for load in range(2):  # the second load is served from the node's tensor cache
            master.load("spread", timeout=600)
            for _ in range(opts.reps if load else 1):
                rates["spread"].append(_decode_rate(master.url, "spread"))
            master.unload()
        sent = _captured_bytes(master.url)
        _whole_model_fits(master)
        master.load("one", timeout=600)
        for _ in range(opts.reps):
            rates["one"].append(_decode_rate(master.url, "one"))
    one, spread = c.med(rates["one"]), c.med(rates["spread"])
    first, second = (sent[0], sent[-1]) if len(sent) >= 2 else (None, None)
    return {
        "decode_tps": {"one": one, "spread": spread},
        "ratio": c.ratio(spread, one) if one and spread else None,
        "target_ratio": 0.65,
        "bytes_sent": {"first_load": first, "second_load": second, "loads": len(sent)},
        "samples": rates,
    }


__all__ = ["through_routers"]
