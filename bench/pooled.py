"""Issue 34: a model spread over two nodes by llama.cpp's RPC engine, against the same model on
one node, in one run, on this machine's loopback.

Arms: `one` is llama-server alone; `spread` is llama-server with `--rpc` to an RPC server
(`-c`, its tensor cache in a fresh folder) and half the layers placed there by the same split
the master computes (router/cluster/pooled/split.py). The model is a demo-shaped model with
2048-wide matrices (F32, 16 MiB each: above llama.cpp's 10 MiB cache threshold, so the
tensor cache applies). Per repetition, in turn: a decode of 64 tokens (`timings.
predicted_per_second`). Reported: decode tokens/s of each arm, their ratio (issue 34's target
>= 0.65 on loopback, which hides network latency: it says little about a LAN), and the bytes
llama-server sent to the RPC server by its first and second load (kernel TCP counters, `ss`),
the second served from the cache. The arm `through_routers` (bench/pooled_routers.py) runs the
same through a master router and a lending node router, the bytes read from the master's load
capture. A report, never a test.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

from backends.base import built_backends_dir
from bench import common as c
from bench.pooled_routers import through_routers
from router.cluster.pooled.sent import bytes_sent
from router.cluster.pooled.split import Share, split_layers

BIG = {"n_layer": 4, "n_embd": 2048, "n_head": 16, "n_ff": 2048}
DECODE = {"prompt": "Once upon a time", "n_predict": 64, "temperature": 0, "ignore_eos": True}


def _rpc_server() -> str | None:
    for name in ("ggml-rpc-server", "rpc-server"):
        found = built_backends_dir() / "bin" / name
        if os.access(found, os.X_OK):
            return str(found)
    return shutil.which("ggml-rpc-server")


def _decode_rate(url: str) -> float:
    status, body, _ = c.http_json("POST", url + "/completion", DECODE, timeout=600)
    if status != 200:
        raise RuntimeError(f"decode failed: {status} {body}")
    return float(body["timings"]["predicted_per_second"])


def _llama(stack: c.Stack, wd: Path, llama: str, model: Path, extra: list[str], name: str) -> str:
    port = c.free_port()
    argv = [llama, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "512"]
    proc = stack.proc(c.Proc([*argv, "-t", "1", *extra], name, wd))
    url = f"http://127.0.0.1:{port}"
    c.wait_http(url + "/health", proc, timeout=300)
    return url


def _spread_args(model: Path, endpoint: str) -> list[str]:
    from router.memory.shape import read_shape

    shape = read_shape(str(model))
    assert shape is not None
    layers = shape.n_layer + 1
    size = -(-shape.tensor_bytes // layers)
    half = Share("node", layers // 2 * size)
    split = split_layers(layers, size, layers * size, [half])
    return ["--rpc", endpoint, *split.argv()]


def _loads(wd: Path, llama: str, rpc: str, model: Path, opts: c.Opts) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"one": [], "spread": []}
    sent: list[int | None] = []
    with c.Stack() as stack:
        port = c.free_port()
        env = {**os.environ, "LLAMA_CACHE": str(wd / "cache")}
        server = c.Proc([rpc, "-H", "127.0.0.1", "-p", str(port), "-c", "-t", "1"], "rpc", wd, env)
        stack.proc(server)
        spread_args = _spread_args(model, f"127.0.0.1:{port}")
        for load in range(2):  # the second load is served from the tensor cache
            with c.Stack() as arm:
                url = _llama(arm, wd, llama, model, spread_args, f"spread-{load}")
                sent.append(asyncio.run(bytes_sent(f"127.0.0.1:{port}")))
                for _ in range(opts.reps if load else 1):
                    rates["spread"].append(_decode_rate(url))
        with c.Stack() as arm:
            url = _llama(arm, wd, llama, model, [], "one")
            for _ in range(opts.reps):
                rates["one"].append(_decode_rate(url))
    one, spread = c.med(rates["one"]), c.med(rates["spread"])
    return {
        "decode_tps": {"one": one, "spread": spread},
        "ratio": c.ratio(spread, one) if one and spread else None,
        "target_ratio": 0.65,
        "bytes_sent": {"first_load": sent[0], "second_load": sent[1]},
        "weight_bytes": model.stat().st_size,
        "samples": rates,
    }


def target_rows(d: dict[str, Any]) -> list[tuple[str, str, Any, float, bool, str, int]]:
    """For bench/report.py: the decode ratio against issue 34's target, and the second
    load's bytes over the first (the tensor cache's saving; the issue's test wants < 0.1)."""
    routed = d.get("through_routers") or {}
    return [
        *_rows(d, ""),
        *_rows(routed, ", through the routers"),
    ]


def _rows(d: dict[str, Any], how: str) -> list[tuple[str, str, Any, float, bool, str, int]]:
    sent = d.get("bytes_sent") or {}
    first, second = sent.get("first_load"), sent.get("second_load")
    share = second / first if first and second is not None else None
    decode = f"Decode t/s spread over 2 nodes / 1 node, loopback{how} (issue 34)"
    cache = f"RPC bytes sent, second load / first (tensor cache){how}"
    return [
        (decode, ">= 0.65", d.get("ratio"), 0.65, True, "", 2),
        (cache, "< 0.1", share, 0.1, False, "", 3),
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    llama, rpc = c.llama_server_path(), _rpc_server()
    if not llama or not rpc:
        data = {"skipped": {"all": c.skip("pooled", "llama-server")}}
        c.save(opts, "pooled", data)
        return data
    from router.demo_models import write_llama_gguf

    with c.workdir("pooled") as wd:
        model = write_llama_gguf(wd / "big.gguf", seed=7, name="pooled-bench", **BIG)
        data = _loads(wd, llama, rpc, model, opts)
        data["through_routers"] = routed = through_routers(wd, llama, model, opts)
    c.log(f"pooled: {data['decode_tps']} ratio {data['ratio']} sent {data['bytes_sent']}")
    c.log(f"pooled through routers: {routed['decode_tps']} ratio {routed['ratio']}")
    c.log(f"pooled through routers, sent: {routed['bytes_sent']}")
    c.save(opts, "pooled", data)
    return data


if __name__ == "__main__":
    main()
