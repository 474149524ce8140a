"""P10: cold start and swap with the real llama-server and the project's tiny demo models.

Arms, interleaved per repetition:
- router cold: no model loaded; request -> first streamed token through tensor-router.
- direct cold: the same llama-server binary with the argv and environment the router used
  (read from the router's backend process), spawned at t0, /health polled every 5 ms, then the
  same request -> first token.
- router swap: chat-a loaded; request for chat-b -> first token.
- direct swap: chat-a running standalone; t0: SIGTERM it, wait for its exit, spawn chat-b,
  poll, request -> first token.
- llama-server router mode (`--models-dir`, `--models-max 1`), when the build supports it:
  cold (autoload on request) and swap, same request.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from bench import common as c

BODY = json.dumps(
    {
        "model": "MODEL",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": True,
    }
)


def first_token(url: str, model: str, timeout: float = 120) -> tuple[float, float]:
    """(seconds to response headers, seconds to the first `data:` event) from now."""
    host, port = url.removeprefix("http://").split(":")
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    conn.request(
        "POST",
        "/v1/chat/completions",
        BODY.replace("MODEL", model),
        {"Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    t_head = time.monotonic() - t0
    if resp.status != 200:
        raise RuntimeError(f"{model}: HTTP {resp.status} {resp.read()[:300]!r}")
    while True:
        line = resp.fp.readline()
        if not line or line.startswith(b"data:"):
            break
    t_first = time.monotonic() - t0
    conn.close()
    return t_head, t_first


def poll_ready(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("direct llama-server exited at start")
        with contextlib.suppress(OSError):
            status, _, _ = c.http_json("GET", url + "/health", timeout=1)
            if status == 200:
                return
        time.sleep(0.005)
    raise RuntimeError("direct llama-server not ready")


def with_port(argv: list[str], port: int) -> list[str]:
    out = list(argv)
    out[out.index("--port") + 1] = str(port)
    return out


def with_model(argv: list[str], old: str, new: str, old_id: str, new_id: str) -> list[str]:
    return [new if a == old else new_id if a == old_id else a for a in argv]


class Direct:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.port = c.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            with_port(argv, self.port),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def llama_router_models(url: str) -> dict[str, str]:
    _, body, _ = c.http_json("GET", url + "/v1/models")
    out = {}
    for m in body.get("data", []) if isinstance(body, dict) else []:
        st = m.get("status")
        out[m["id"]] = st.get("value") if isinstance(st, dict) else str(st)
    return out


def llama_router_unload(url: str, model: str) -> None:
    c.http_json("POST", url + "/models/unload", {"model": model})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and llama_router_models(url).get(model) != "unloaded":
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    reps = 4 if opts.quick else max(opts.reps, 10)
    llama = c.llama_server_path()
    if not llama:
        data = {"skipped": {"all": c.skip("cold start", "llama-server")}}
        c.save(opts, "cold_start", data)
        return data
    from router.demo_models import generate_demo_models

    results: dict[str, list[dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    notes: dict[str, Any] = {}
    with c.workdir("cold") as wd, c.Stack() as stack:
        files = generate_demo_models(wd / "demo", whisper=False)
        models = {k: files[k] for k in ("chat-a", "chat-b")}
        router = c.Router(
            wd / "router",
            models,
            Path(llama),
            extra_kcpps={k: {"contextsize": 2048} for k in models},
            runtime="max_queue: 1024, residency: lane",  # the swap arm stops chat-a first
        )
        stack.callback(router.stop)
        router.start()
        # Warm the page cache and read the argv/env the router launches with.
        router.load("chat-a")
        first_token(router.url, "chat-a")
        rt = router.backend("chat-a")
        bproc = psutil.Process(int(rt["pid"]))
        argv_a, env, cwd = bproc.cmdline(), bproc.environ(), bproc.cwd()
        router.load("chat-b")
        argv_b = psutil.Process(int(router.backend("chat-b")["pid"])).cmdline()
        router.unload()
        notes["router_argv_a"] = argv_a
        notes["router_argv_b"] = argv_b
        _path_a, path_b = str(models["chat-a"]), str(models["chat-b"])

        llama_router_url = None
        if (
            "--models-dir"
            in subprocess.run([llama, "--help"], capture_output=True, text=True).stdout
        ):
            mdir = wd / "llama-router-models"
            mdir.mkdir()
            for k, p in models.items():
                (mdir / f"{k}.gguf").symlink_to(p)
            port = c.free_port()
            lr_argv = [
                llama,
                "--models-dir",
                str(mdir),
                "--models-max",
                "1",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "-c",
                "2048",
            ]
            lr = stack.proc(c.Proc(lr_argv, "llama-router", wd))
            llama_router_url = f"http://127.0.0.1:{port}"
            c.wait_http(llama_router_url + "/v1/models", lr, 60)
            first_token(llama_router_url, "chat-a")  # warm
            llama_router_unload(llama_router_url, "chat-a")
            notes["llama_router_argv"] = lr_argv
        else:
            skipped["llama-router"] = "arm skipped: this llama-server build has no router mode"

        def run(arm: str, rep: int) -> dict[str, Any]:
            if arm == "router cold":
                router.unload()
                head, first = first_token(router.url, "chat-a")
            elif arm == "direct cold":
                d = Direct(argv_a, env, cwd)
                t0 = time.monotonic()
                poll_ready(d.url, d.proc)
                ready = time.monotonic() - t0
                head, first = first_token(d.url, "chat-a")
                head, first = head + ready, first + ready
                d.stop()
            elif arm == "router swap":
                router.load("chat-a")
                head, first = first_token(router.url, "chat-b")
            elif arm == "direct swap":
                a = Direct(argv_a, env, cwd)
                poll_ready(a.url, a.proc)
                first_token(a.url, "chat-a")
                t0 = time.monotonic()
                a.stop()
                b = Direct(with_model(argv_b, path_b, path_b, "chat-b", "chat-b"), env, cwd)
                poll_ready(b.url, b.proc)
                ready = time.monotonic() - t0
                head, first = first_token(b.url, "chat-b")
                head, first = head + ready, first + ready
                b.stop()
            elif arm == "llama-router cold":
                assert llama_router_url
                llama_router_unload(llama_router_url, "chat-b")
                llama_router_unload(llama_router_url, "chat-a")
                head, first = first_token(llama_router_url, "chat-a")
            else:  # llama-router swap
                assert llama_router_url
                first_token(llama_router_url, "chat-a")
                head, first = first_token(llama_router_url, "chat-b")
            return {"head_ms": head * 1000, "first_ms": first * 1000}

        arms = ["router cold", "direct cold", "router swap", "direct swap"]
        if llama_router_url:
            arms += ["llama-router cold", "llama-router swap"]
        results = c.interleave(arms, reps, run)
        router.unload()
    summary: dict[str, Any] = {
        a: {"first_ms": c.med([r["first_ms"] for r in v])} for a, v in results.items()
    }
    summary["cold_overhead_ms"] = c.per_rep(
        results, "router cold", "direct cold", "first_ms", c.diff
    )
    summary["swap_overhead_ms"] = c.per_rep(
        results, "router swap", "direct swap", "first_ms", c.diff
    )
    if "llama-router cold" in results:
        summary["llama_router_cold_overhead_ms"] = c.per_rep(
            results, "llama-router cold", "direct cold", "first_ms", c.diff
        )
        summary["llama_router_swap_overhead_ms"] = c.per_rep(
            results, "llama-router swap", "direct swap", "first_ms", c.diff
        )
    data = {
        "summary": summary,
        "skipped": skipped,
        "notes": notes,
        "blocks": results,
        "reps_used": reps,
    }
    c.save(opts, "cold_start", data)
    return data


if __name__ == "__main__":
    main()
