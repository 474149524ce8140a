"""Issue 26, "Overlap the swap": the load time of a swap with and without the read-ahead.

Two real llama-server models on one text lane with room for one (`max_batch_wait: 0`, so the
lane drains as soon as the other model waits). Per arm (`runtime.readahead: true` / `false`,
one router each, repetitions interleaved) and repetition: chat-a is loaded and given a long
generation (the slow drain); chat-b's file is dropped from the page cache
(POSIX_FADV_DONTNEED on that file alone: no root needed, no other file touched; `fincore`
checks it when installed); then chat-b is asked for, waits for the drain, and loads. Reported
from chat-b's load capture: the load time (`duration_ms`) and what the read-ahead had read
when the load began (`readahead`). A report, never a test.

The default models are the demo chat model's shape enlarged to about 270 MB each (F32), so
reading one from disk takes measurable time; `--quick` uses the tiny demo models (a few MB),
whose load is all process start-up, so its ratio says little.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import common as c

BIG = {"n_layer": 4, "n_embd": 1024, "n_head": 16, "n_ff": 4096}


def _models(folder: Path, quick: bool) -> dict[str, Path]:
    if quick:
        from router.demo_models import generate_demo_models

        files = generate_demo_models(folder, whisper=False)
        return {k: files[k] for k in ("chat-a", "chat-b")}
    from router.demo_models.gguf_llama import write_llama_gguf

    folder.mkdir(parents=True, exist_ok=True)
    return {
        name: write_llama_gguf(folder / f"{name}.gguf", seed=seed, name=name, **BIG)
        for seed, name in ((1, "chat-a"), (2, "chat-b"))
    }


def _drop_from_cache(path: Path) -> float | None:
    """Evict the file's cached pages (it must not be mapped by a running backend); returns
    the fraction still cached per `fincore` (None when fincore is not installed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    fincore = shutil.which("fincore")
    if fincore is None:
        return None
    out = subprocess.run(
        [fincore, "--bytes", "--noheadings", "--output", "RES", str(path)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return int(out) / path.stat().st_size if out.isdigit() else None


def _chat(url: str, model: str, tokens: int) -> float:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": tokens,
        "ignore_eos": True,  # llama-server: generate all of them (the drain's length)
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        resp.read()
    return time.monotonic()


def _newest_capture(url: str, model: str) -> dict[str, Any]:
    status, body, _ = c.http_json("GET", f"{url}/router/v1/site/load-captures?limit=10")
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"load captures: {status} {body}")
    return next(cap for cap in body["captures"] if cap["model"] == model)


def _until_in_flight(router: c.Router, model: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(rt.get("model") == model and rt.get("in_flight") for rt in router.runtimes()):
            return
        time.sleep(0.01)
    raise RuntimeError(f"{model} never had a request in flight")


def _swap(router: c.Router, files: dict[str, Path], drain_tokens: int) -> dict[str, Any]:
    router.load("chat-a")  # stops chat-b if it ran, so its file is mapped by nobody
    cached = _drop_from_cache(files["chat-b"])
    ends: dict[str, float] = {}
    a = threading.Thread(target=lambda: ends.update(a=_chat(router.url, "chat-a", drain_tokens)))
    a.start()
    _until_in_flight(router, "chat-a")  # chat-b's request now makes the lane drain
    sent = time.monotonic()
    ends["b"] = _chat(router.url, "chat-b", 1)
    a.join()
    capture = _newest_capture(router.url, "chat-b")
    router.load("chat-a")  # chat-b stops: the other arm's router may drop its file next
    return {
        "load_ms": capture["duration_ms"],
        "readahead": capture.get("readahead"),
        "drain_s": ends["a"] - sent,
        "b_after_a_s": ends["b"] - ends["a"],
        "cached_after_drop": cached,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    llama = c.llama_server_path()
    if not llama:
        data: dict[str, Any] = {"skipped": {"all": c.skip("readahead", "llama-server")}}
        c.save(opts, "readahead", data)
        return data
    drain_tokens = 60 if opts.quick else 12
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    with c.workdir("readahead") as wd, contextlib.ExitStack() as stack:
        files = _models(wd / "models", opts.quick)
        routers = {}
        for arm in ("on", "off"):
            router = c.Router(
                wd / f"router-{arm}",
                files,
                Path(llama),
                analytics_keys="load_capture_enabled: true",
                extra_kcpps={k: {"contextsize": 2048} for k in files},
                runtime=f"readahead: {'true' if arm == 'on' else 'false'}, max_batch_wait: 0,"
                " stop_grace: 5s, max_queue: 64",
            )
            routers[arm] = router.start()
            stack.callback(router.stop)
        for rep in range(opts.reps):
            arms = ("on", "off") if rep % 2 == 0 else ("off", "on")  # the order rotates
            for arm in arms:
                runs[arm].append(_swap(routers[arm], files, drain_tokens))
                c.log(f"{arm} rep {rep}: {runs[arm][-1]}")
        sizes = {k: p.stat().st_size for k, p in files.items()}
    on = c.med([r["load_ms"] for r in runs["on"]])
    off = c.med([r["load_ms"] for r in runs["off"]])
    summary = {
        "model_bytes": sizes,
        "load_ms_with_readahead": on,
        "load_ms_without_readahead": off,
        "with_over_without": c.per_rep(runs, "on", "off", "load_ms", c.ratio),
        "readahead_done": [bool(r["readahead"] and r["readahead"]["done"]) for r in runs["on"]],
        "drain_s": c.med([r["drain_s"] for r in runs["on"] + runs["off"]]),
        "cache": "chat-b's file dropped from the page cache before each swap (POSIX_FADV_DONTNEED)",
    }
    data = {"summary": summary, "runs": runs}
    c.save(opts, "readahead", data)
    return data


if __name__ == "__main__":
    main()
