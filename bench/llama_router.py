"""tensor-router versus llama-server's own router mode, both in front of the real llama-server.

Arms (wrk, 1 connection, non-streamed chat completion with max_tokens 4 on the demo model):
- direct: the llama-server tensor-router launched, on its own port;
- router: tensor-router in front of it;
- llama-router: llama-server started with `--models-dir` (router mode), which spawns its own
  llama-server child and proxies to it;
- llama-child: that child, directly (its argv differs a little from ours, so each router is
  compared with its own backend).
Skipped when llama-server is missing or has no router mode.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from bench import common as c

PATH = "/v1/chat/completions"
BODY = json.dumps(
    {
        "model": "chat-a",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "temperature": 0,
    }
)


def listening_port(pid: int) -> int | None:
    for conn in psutil.Process(pid).net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN:
            return int(conn.laddr.port)
    return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    llama = c.llama_server_path()
    if not llama:
        data = {"skipped": {"all": c.skip("llama-server router mode", "llama-server")}}
        c.save(opts, "llama_router", data)
        return data
    if (
        "--models-dir"
        not in subprocess.run([llama, "--help"], capture_output=True, text=True).stdout
    ):
        data = {"skipped": {"all": "arm skipped: this llama-server build has no router mode"}}
        c.save(opts, "llama_router", data)
        return data
    from router.demo_models import generate_demo_models

    with c.workdir("llama-router") as wd, c.Stack() as stack:
        files = generate_demo_models(wd / "demo", whisper=False)
        router = c.Router(
            wd / "router",
            {"chat-a": files["chat-a"]},
            Path(llama),
            extra_kcpps={"chat-a": {"contextsize": 2048}},
        )
        stack.callback(router.stop)
        router.start()
        router.load("chat-a")
        rt = router.backend("chat-a")
        mdir = wd / "models"
        mdir.mkdir()
        (mdir / "chat-a.gguf").symlink_to(files["chat-a"])
        port = c.free_port()
        lr = stack.proc(
            c.Proc(
                [
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
                ],
                "llama-router",
                wd,
            )
        )
        lr_url = f"http://127.0.0.1:{port}"
        c.wait_http(lr_url + "/v1/models", lr, 60)
        c.http_json("POST", lr_url + PATH, json.loads(BODY), timeout=120)  # autoload
        child_port = None
        for _ in range(100):
            kids = psutil.Process(lr.pid).children()
            child_port = listening_port(kids[0].pid) if kids else None
            if child_port:
                break
            time.sleep(0.1)
        urls = {
            "direct": f"http://127.0.0.1:{rt['port']}",
            "router": router.url,
            "llama-router": lr_url,
        }
        if child_port:
            urls["llama-child"] = f"http://127.0.0.1:{child_port}"
        for url in urls.values():
            c.load_test(url + PATH, BODY, 1, 1)

        def run(arm: str, rep: int) -> dict[str, Any]:
            return c.load_test(urls[arm] + PATH, BODY, 1, opts.block)

        results = c.interleave(list(urls), opts.reps, run)
    summary: dict[str, Any] = {
        a: {"p50_ms": c.med([r["p50_ms"] for r in v]), "rps": c.med([r["rps"] for r in v])}
        for a, v in results.items()
    }
    summary["router_added_p50_ms"] = c.per_rep(results, "router", "direct", "p50_ms", c.diff)
    summary["router_p50_ratio"] = c.per_rep(results, "router", "direct", "p50_ms", c.ratio)
    if "llama-child" in results:
        summary["llama_router_added_p50_ms"] = c.per_rep(
            results, "llama-router", "llama-child", "p50_ms", c.diff
        )
        summary["llama_router_p50_ratio"] = c.per_rep(
            results, "llama-router", "llama-child", "p50_ms", c.ratio
        )
    data = {"client": c.client_name(), "summary": summary, "blocks": results}
    c.save(opts, "llama_router", data)
    return data


if __name__ == "__main__":
    main()
