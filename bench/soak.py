"""R12 soak: two models alternating every request, four clients, random client aborts and
random unload calls, for a bounded time. Reports whether anything hung, leaked or grew.

    .venv/bin/python -m bench.soak [--seconds 600]

A real `tensor-router start` process with fake llama-server backends (fast, 20 tokens/s
streams); the client checks every request completes or errors within its deadline, and the
report samples the router's RSS, open file descriptors and child processes over time.
Not a test (it takes minutes); the result goes to bench/out/soak.json and bench/SOAK.md.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from bench import common as c
from tests.fakes.wrappers import write_fake_binary

CLIENTS = 4
REQUEST_DEADLINE = 30.0
MODELS = ("chat-a", "chat-b")


def _config(work: Path, port: int) -> Path:
    kcpps = work / "kcpps"
    kcpps.mkdir(parents=True, exist_ok=True)
    for model in MODELS:
        (work / f"{model}.gguf").write_bytes(b"GGUF")
        (kcpps / f"{model}.kcpps").write_text(
            json.dumps({"model_param": str(work / f"{model}.gguf")})
        )
    config = work / "router.yaml"
    fake = write_fake_binary(work, "llamacpp", switches="--token-rate 200")
    config.write_text(
        yaml.safe_dump(
            {
                "security": {"profile": "trusted_lan"},
                "server": {"bind": f"127.0.0.1:{port}"},
                "models": {"config_dir": str(kcpps)},
                "llama": {"binary_path": str(fake)},
                "runtime": {"max_batch_wait": "1s", "stop_grace": "2s"},
                "analytics": {"database_path": str(work / "router.sqlite")},
            }
        )
    )
    return config


async def _client(base: str, stop: float, tally: dict[str, int], rng: random.Random) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=REQUEST_DEADLINE) as client:
        turn = 0
        while time.monotonic() < stop:
            model = MODELS[turn % 2]
            turn += 1
            body = {"model": model, "messages": [{"role": "user", "content": "x"}],
                    "max_tokens": rng.randint(1, 12), "stream": rng.random() < 0.5}  # fmt: skip
            try:
                if rng.random() < 0.1:  # a client that goes away mid-request
                    await asyncio.wait_for(client.post("/v1/chat/completions", json=body), 0.05)
                else:
                    r = await client.post("/v1/chat/completions", json=body)
                    tally["ok" if r.status_code == 200 else f"status_{r.status_code}"] += 1
                    continue
            except TimeoutError:
                tally["aborted"] += 1
            except httpx.TimeoutException:
                tally["deadline_exceeded"] += 1
            except httpx.HTTPError as exc:
                tally[f"error_{type(exc).__name__}"] += 1


async def _unloader(base: str, stop: float, tally: dict[str, int], rng: random.Random) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=REQUEST_DEADLINE) as client:
        while time.monotonic() < stop:
            await asyncio.sleep(rng.uniform(2, 8))
            r = await client.post("/router/v1/unload", json={"target": "text"})
            tally["unload_ok" if r.status_code == 200 else "unload_failed"] += 1


def _sample(router: psutil.Process) -> dict[str, Any]:
    kids = [p for p in router.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    zombies = [p for p in router.children(recursive=True) if p.status() == psutil.STATUS_ZOMBIE]
    return {
        "t": time.time(),
        "rss_mib": round(router.memory_info().rss / 2**20, 1),
        "fds": router.num_fds(),
        "children": len(kids),
        "zombies": len(zombies),
    }


async def _monitor(router: psutil.Process, stop: float, samples: list[dict[str, Any]]) -> None:
    while time.monotonic() < stop:
        samples.append(_sample(router))
        await asyncio.sleep(5)


async def drive(base: str, router: psutil.Process, seconds: float) -> dict[str, Any]:
    tally: Counter[str] = Counter()
    samples: list[dict[str, Any]] = []
    stop = time.monotonic() + seconds
    started = time.monotonic()
    await asyncio.gather(
        *(_client(base, stop, tally, random.Random(i)) for i in range(CLIENTS)),
        _unloader(base, stop, tally, random.Random(99)),
        _monitor(router, stop, samples),
    )
    samples.append(_sample(router))
    return {"wall": round(time.monotonic() - started, 1), "tally": dict(tally), "samples": samples}


def soak(seconds: float, work: Path) -> dict[str, Any]:
    port = c.free_port()
    config = _config(work, port)
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", "start", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        c.wait_http(base + "/health", None, 30)
        result = asyncio.run(drive(base, psutil.Process(proc.pid), seconds))
        result["health_after"] = httpx.get(base + "/health", timeout=5).status_code
    finally:
        proc.send_signal(signal.SIGTERM)
        result_code = proc.wait(timeout=60)
    return {"seconds": seconds, **result, "exit_code": result_code}


def report(result: dict[str, Any]) -> str:
    samples = result["samples"]
    warm = samples[min(2, len(samples) - 1) :]  # after start-up allocations
    rss = [s["rss_mib"] for s in warm]
    fds = [s["fds"] for s in warm]
    growth = (rss[-1] - rss[0]) / rss[0] if rss and rss[0] else 0.0
    tally = result["tally"]
    failures = {k: v for k, v in tally.items() if k not in ("ok", "aborted", "unload_ok")}
    lines = [
        "# R12 soak",
        "",
        f"`.venv/bin/python -m bench.soak --seconds {result['seconds']:g}`: {CLIENTS} clients "
        "alternating two models on every request (half streamed), 10 % of requests abandoned by "
        "the client after 50 ms, an unload of the text lane every 2-8 s, fake llama-server backends.",
        "",
        f"- requests answered 200: {tally.get('ok', 0)}; abandoned by the client: "
        f"{tally.get('aborted', 0)}; unloads: {tally.get('unload_ok', 0)}",
        f"- anything else (errors, deadlines over {REQUEST_DEADLINE:g} s): {failures or 'none'}",
        f"- router RSS {rss[0]:.1f} -> {rss[-1]:.1f} MiB ({growth:+.1%}), max {max(rss):.1f}",
        f"- open fds {fds[0]} -> {fds[-1]} (max {max(fds)}); zombies seen: "
        f"{max(s['zombies'] for s in samples)}; children at the end: {samples[-1]['children']}",
        f"- /health after the soak: {result['health_after']}; exit code on SIGTERM: "
        f"{result['exit_code']}",
        "",
        "R12 asks: no deadlock, no leaked pid/fd, RSS flat (within 10 %), every request completes "
        "or errors within its deadlines.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    seconds = float(argv[argv.index("--seconds") + 1]) if "--seconds" in argv else 600.0
    with c.workdir("soak") as work:
        result = soak(seconds, work)
    c.OUT.mkdir(parents=True, exist_ok=True)
    (c.OUT / "soak.json").write_text(json.dumps(result, indent=1))
    text = report(result)
    (c.BENCH / "SOAK.md").write_text(text)
    print(text)
    return result


if __name__ == "__main__":
    main()
