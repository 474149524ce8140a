"""R12 soak: two models alternating every request, four clients, random client aborts and
random unload calls, for a bounded time; then pass/fail checks and a non-zero exit on failure.

    .venv/bin/python -m bench.soak [--seconds 600] [--json PATH] [--report PATH]

A real `tensor-router start` process with fake llama-server backends (fast, 200 tokens/s
streams). The clients check that every request completes or errors within its deadline; a
monitor samples the router's RSS, open file descriptors and child processes every few seconds.
At the end the text lane is unloaded, the clients are gone, and the router is stopped with
SIGTERM. The checks (`verdict`):

- no failure beyond the injected ones: every request the client did not abandon answered 200,
  every unload call answered 200, nothing ran past its deadline;
- no leaked process: no zombie outlives one sample, no backend is left once the lane is
  unloaded, and every process under the router is gone after it exits (exit code 0);
- no leaked fd: once quiet, the router holds no more fds than it did under load at warm-up;
- RSS growth under 10 %, measured from the end of the warm-up (a quarter of the run, at most
  60 s: the first allocations of imports, pools and caches are not growth) to the end.

`make soak` runs 10 minutes and writes bench/out/soak.json and bench/SOAK.md;
tests/test_soak.py runs 2 minutes in `make test` with its own output paths.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
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
SAMPLE_EVERY = 5.0
MAX_RSS_GROWTH = 0.10
FD_SLACK = 4  # a lazily opened file (log rotation, a sqlite journal) is not a leak
QUIET_WITHIN = 15.0  # for the last backend to stop after the final unload
EXPECTED = ("ok", "aborted", "unload_ok")  # the only outcomes the soak injects or wants


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
                # One runtime per lane: the two models keep swapping (the churn it soaks).
                "runtime": {"max_batch_wait": "1s", "stop_grace": "2s", "residency": "lane"},
                "analytics": {"database_path": str(work / "router.sqlite")},
            }
        )
    )
    return config


def _body(turn: int, rng: random.Random) -> dict[str, Any]:
    return {
        "model": MODELS[turn % 2],
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": rng.randint(1, 12),
        "stream": rng.random() < 0.5,
    }


async def _client(base: str, stop: float, tally: Counter[str], rng: random.Random) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=REQUEST_DEADLINE) as client:
        turn = 0
        while time.monotonic() < stop:
            body = _body(turn, rng)
            turn += 1
            # 10 %: a client that goes away after 50 ms (if the answer came sooner, it counts).
            patience = 0.05 if rng.random() < 0.1 else None
            try:
                r = await asyncio.wait_for(client.post("/v1/chat/completions", json=body), patience)
                tally["ok" if r.status_code == 200 else f"status_{r.status_code}"] += 1
            except TimeoutError:
                tally["aborted"] += 1
            except httpx.TimeoutException:
                tally["deadline_exceeded"] += 1
            except httpx.HTTPError as exc:
                tally[f"error_{type(exc).__name__}"] += 1


async def _unloader(base: str, stop: float, tally: Counter[str], rng: random.Random) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=REQUEST_DEADLINE) as client:
        while (left := stop - time.monotonic()) > 0:
            await asyncio.sleep(min(left, rng.uniform(2, 8)))
            try:
                r = await client.post("/router/v1/unload", json={"target": "text"})
                tally["unload_ok" if r.status_code == 200 else f"unload_{r.status_code}"] += 1
            except httpx.HTTPError as exc:
                tally[f"unload_error_{type(exc).__name__}"] += 1


def _backends(router: psutil.Process) -> list[psutil.Process]:
    found = []
    for p in router.children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "fake_backend" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def _sample(router: psutil.Process, started: float) -> dict[str, Any]:
    kids = router.children(recursive=True)
    zombies = []
    for p in kids:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                zombies.append(p.pid)
        except psutil.NoSuchProcess:
            continue
    return {
        "t": round(time.monotonic() - started, 1),
        "rss_mib": round(router.memory_info().rss / 2**20, 2),
        "fds": router.num_fds(),
        "children": len(kids) - len(zombies),
        "zombies": zombies,
    }


async def _monitor(
    router: psutil.Process, started: float, stop: float, samples: list[dict[str, Any]]
) -> None:
    while time.monotonic() < stop:
        samples.append(_sample(router, started))
        await asyncio.sleep(min(SAMPLE_EVERY, max(0.0, stop - time.monotonic())))


async def _quiesce(base: str, router: psutil.Process) -> float:
    """Unload the text lane once the clients are gone; seconds until no backend is left."""
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=base, timeout=REQUEST_DEADLINE) as client:
        await client.post("/router/v1/unload", json={"target": "text"})
    # The router stops its children in the background; nothing to await but their exit.
    while _backends(router) and time.monotonic() - started < QUIET_WITHIN:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    return round(time.monotonic() - started, 2)


async def drive(base: str, router: psutil.Process, seconds: float) -> dict[str, Any]:
    tally: Counter[str] = Counter()
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    stop = started + seconds
    await asyncio.gather(
        *(_client(base, stop, tally, random.Random(i)) for i in range(CLIENTS)),
        _unloader(base, stop, tally, random.Random(99)),
        _monitor(router, started, stop, samples),
    )
    samples.append(_sample(router, started))
    quiet_after = await _quiesce(base, router)
    quiet = _sample(router, started)
    return {
        "wall": round(time.monotonic() - started, 1),
        "tally": dict(tally),
        "samples": samples,
        "quiet": {**quiet, "after_s": quiet_after, "backends": len(_backends(router))},
    }


def _stop(proc: subprocess.Popen[bytes], router: psutil.Process) -> dict[str, Any]:
    """SIGTERM, then which processes under the router outlived it (they must not)."""
    try:
        tree = router.children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    proc.send_signal(signal.SIGTERM)
    try:
        code: int | None = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        code = None
    _, alive = psutil.wait_procs(tree, timeout=10)
    left = [p.pid for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    return {"exit_code": code, "left_after_exit": left}


def soak(seconds: float, work: Path) -> dict[str, Any]:
    port = c.free_port()
    config = _config(work, port)
    log = work / "router.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "router.cli", "start", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the cleanup below reaches only it
        )
    base = f"http://127.0.0.1:{port}"
    router = psutil.Process(proc.pid)
    result: dict[str, Any] = {"seconds": seconds}
    try:
        c.wait_http(base + "/health", None, 60)
        result.update(asyncio.run(drive(base, router, seconds)))
        result["health_after"] = httpx.get(base + "/health", timeout=5).status_code
    finally:
        result.update(_stop(proc, router))
        if result["exit_code"] != 0 or result["left_after_exit"] or "samples" not in result:
            result["router_log_tail"] = log.read_bytes()[-4000:].decode(errors="replace")
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # only what the checks already reported
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
    return result


def warm_up(seconds: float) -> float:
    return min(60.0, seconds / 4)


def verdict(result: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """(check, passed, detail) for every R12 promise the soak can observe."""
    if "samples" not in result:  # the router never became ready, or the drive crashed
        return [("the soak ran", False, result.get("router_log_tail", "no router log")[-500:])]
    samples, quiet, tally = result["samples"], result["quiet"], result["tally"]
    warm = [s for s in samples if s["t"] >= warm_up(result["seconds"])] or samples[-1:]
    early = [s for s in samples if s["t"] < warm_up(result["seconds"])] or samples[:1]
    base_rss = statistics.median(s["rss_mib"] for s in warm[:3])
    end_rss = statistics.median(s["rss_mib"] for s in [*warm[-2:], quiet])
    growth = (end_rss - base_rss) / base_rss
    fd_base = max(s["fds"] for s in early)
    failures = {k: v for k, v in tally.items() if k not in EXPECTED}
    seen = [set(s["zombies"]) for s in [*samples, quiet]]
    lasting = sorted(set().union(*(a & b for a, b in zip(seen, seen[1:], strict=False))))
    return [
        ("requests answered", tally.get("ok", 0) > 0, f"{tally.get('ok', 0)} answered 200"),
        ("no failure beyond the injected ones", not failures, str(failures or "none")),
        ("no lasting zombie", not lasting, f"pids {lasting}" if lasting else "none"),
        (
            "no backend left after the final unload",
            quiet["backends"] == 0,
            f"{quiet['backends']} left after {quiet['after_s']} s",
        ),
        (
            "nothing outlives the router",
            not result["left_after_exit"],
            f"left: {result['left_after_exit'] or 'none'}",
        ),
        ("clean exit on SIGTERM", result["exit_code"] == 0, f"exit code {result['exit_code']}"),
        (
            "/health after the soak",
            result.get("health_after") == 200,
            str(result.get("health_after")),
        ),
        (
            "no leaked fd",
            quiet["fds"] <= fd_base + FD_SLACK,
            f"{quiet['fds']} when quiet, at most {fd_base} at warm-up (+{FD_SLACK} allowed)",
        ),
        (
            f"RSS growth under {MAX_RSS_GROWTH:.0%}",
            growth < MAX_RSS_GROWTH,
            f"{base_rss:.1f} -> {end_rss:.1f} MiB ({growth:+.1%}) after a "
            f"{warm_up(result['seconds']):g} s warm-up",
        ),
    ]


def report(result: dict[str, Any], checks: list[tuple[str, bool, str]]) -> str:
    tally = result["tally"]
    rss = [s["rss_mib"] for s in result["samples"]]
    lines = [
        "# R12 soak",
        "",
        f"`.venv/bin/python -m bench.soak --seconds {result['seconds']:g}`: {CLIENTS} clients "
        "alternating two models on every request (half streamed), 10 % of requests abandoned by "
        "the client after 50 ms, an unload of the text lane every 2-8 s, fake llama-server backends.",
        "",
        f"Requests answered 200: {tally.get('ok', 0)}; abandoned by the client: "
        f"{tally.get('aborted', 0)}; unloads: {tally.get('unload_ok', 0)}. Router RSS "
        f"{rss[0]:.1f} MiB at start, max {max(rss):.1f}.",
        "",
        "| Check | Result | Detail |",
        "|---|---|---|",
        *(f"| {name} | {'pass' if ok else '**FAIL**'} | {detail} |" for name, ok, detail in checks),
        "",
        f"Verdict: {'pass' if all(ok for _, ok, _ in checks) else 'FAIL'}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--json", type=Path, default=c.OUT / "soak.json")
    parser.add_argument("--report", type=Path, default=c.BENCH / "SOAK.md")
    args = parser.parse_args(argv)
    with c.workdir("soak") as work:
        result = soak(args.seconds, work)
    checks = verdict(result)
    result["checks"] = [{"check": n, "passed": ok, "detail": d} for n, ok, d in checks]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    text = report(result, checks)
    args.report.write_text(text)
    print(text)
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
