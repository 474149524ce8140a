"""The chat-a / chat-b benchmarks on the real llama-server (bench/swaps.py, bench/residency.py):
one router per arm (a `runtime:` section) and repetition, the arms interleaved, the two demo
models, and the client calls both workloads make (a chat request, the router's load count)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import common as c

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}

Runs = dict[str, list[dict[str, Any]]]  # arm -> one figure row per repetition
# The workload's figures from one router, given the run's size (requests; per client, say).
Workload = Callable[[c.Router, int], dict[str, Any]]


def ask(url: str, at: float, model: str) -> float:
    """A chat request to `model` sent at monotonic time `at`; its queue wait (ms)."""
    time.sleep(max(0.0, at - time.monotonic()))  # the arrival schedule
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps({**BODY, "model": model}).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        resp.read()
        return float(resp.headers.get("X-Tensors-Queue-Wait-Ms", "nan"))


def loads(url: str) -> float:
    """The router's successful loads so far (`tensor_router_loads_total`, every family)."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    found = re.findall(r'^tensor_router_loads_total\{[^}]*result="ok"[^}]*\} (\S+)$', text, re.M)
    return sum(float(v) for v in found)


def compare(
    opts: c.Opts,
    name: str,
    arms: Mapping[str, str],
    workload: Workload,
    summarize: Callable[[Runs, int], dict[str, Any]],
    size: int,
) -> dict[str, Any]:
    """`workload` of `size` once per arm (name -> `runtime:` keys) and repetition, the runs
    and their summary saved as `name`.

    Without llama-server the result is a skip naming how to install it."""
    llama = c.llama_server_path()
    if not llama:
        data: dict[str, Any] = {"skipped": {"all": c.skip(name, "llama-server")}}
    else:
        runs = _run_arms(opts, name, Path(llama), arms, lambda r: workload(r, size))
        data = {"summary": summarize(runs, size), "runs": runs}
    c.save(opts, name, data)
    return data


def _run_arms(
    opts: c.Opts,
    name: str,
    llama: Path,
    arms: Mapping[str, str],
    workload: Callable[[c.Router], dict[str, Any]],
) -> Runs:
    from router.demo_models import generate_demo_models

    runs: Runs = {arm: [] for arm in arms}
    with c.workdir(name) as wd:
        files = generate_demo_models(wd / "demo", whisper=False)
        models = {k: files[k] for k in ("chat-a", "chat-b")}
        for rep in range(opts.reps):
            for arm, runtime in arms.items():  # interleaved: the box's load hits both arms
                router = c.Router(
                    wd / f"router-{arm}-{rep}",
                    models,
                    llama,
                    extra_kcpps={k: {"contextsize": 2048} for k in models},
                    runtime=runtime,
                )
                router.start()
                try:
                    runs[arm].append(workload(router))
                finally:
                    router.stop()
                c.log(f"{arm} rep {rep}: {runs[arm][-1]}")
    return runs


def medians(runs: Runs, key: str, label: str = "") -> dict[str, float | None]:
    """Each arm's median of `key` over the repetitions, as `<arm>_<label or key>`."""
    return {f"{arm}_{label or key}": c.med([r[key] for r in rows]) for arm, rows in runs.items()}
