"""Issue 17: what the router adds in front of a real llama-server, next to nginx and
llama-server's own router mode, in one interleaved run.

Arms, all over the tiny demo model (`POST /v1/completions`, max_tokens 1 unless stated):
- direct: the llama-server tensor-router launched, on its own port;
- router: tensor-router (trusted_lan, analytics on) in front of it;
- nginx: nginx (keep-alive upstream, buffering off) in front of the same port;
- llama-router: llama-server started with `--models-dir` (router mode), proxying to a child
  llama-server it spawned; llama-child: that child, directly.
Scenarios per arm and repetition: one connection with http.client, one with httpx (client CPU
per request reported: the client library's own overhead), 8 connections (wrk), and a 64-token
streamed answer timed to its last byte (http.client). Added = arm p50 - direct p50 within a
repetition, then the median over repetitions.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from bench import common as c
from bench.arms import start_nginx_proxy
from bench.clients import run_block

PATH = "/v1/completions"
ONE = {"model": "chat-a", "prompt": "hi", "max_tokens": 1, "temperature": 0}
STREAM = {**ONE, "max_tokens": 64, "stream": True, "ignore_eos": True}
SCENARIOS = ("1 conn, http.client", "1 conn, httpx", "8 conns, wrk", "64-token stream")
# llama-server serves each connection on one HTTP thread (8 here by default) and keeps an idle
# one for 5 s; after the 8-connection block the proxies' pooled connections hold them all, and
# the next arm's new connections were refused (a 502 from nginx and from the router alike).
HTTP_THREADS = ["--threads-http", "64"]


def llama_wrapper(path: Path, llama: str) -> Path:
    path.write_text(f'#!/bin/bash\nexec {llama} "$@" {" ".join(HTTP_THREADS)}\n')
    path.chmod(0o755)
    return path


def listening_port(pid: int) -> int | None:
    for conn in psutil.Process(pid).net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN:
            return int(conn.laddr.port)
    return None


def start_llama_router(stack: c.Stack, wd: Path, llama: str, model: Path) -> dict[str, str]:
    """llama-server in router mode, its child loaded; {} when this build has no router mode."""
    if (
        "--models-dir"
        not in subprocess.run([llama, "--help"], capture_output=True, text=True).stdout
    ):
        return {}
    mdir = wd / "models"
    mdir.mkdir()
    (mdir / "chat-a.gguf").symlink_to(model)
    port = c.free_port()
    argv = [llama, "--models-dir", str(mdir), "--models-max", "1"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "-c", "2048", *HTTP_THREADS]
    proc = stack.proc(c.Proc(argv, "llama-router", wd))
    url = f"http://127.0.0.1:{port}"
    c.wait_http(url + "/v1/models", proc, 60)
    c.http_json("POST", url + PATH, ONE, timeout=120)  # autoload
    urls = {"llama-router": url}
    for _ in range(100):
        kids = psutil.Process(proc.pid).children()
        child = listening_port(kids[0].pid) if kids else None
        if child:
            urls["llama-child"] = f"http://127.0.0.1:{child}"
            break
        time.sleep(0.1)
    return urls


def start_router(
    wd: Path, stack: c.Stack, llama: str, launcher: list[str] | None = None
) -> tuple[c.Router, dict[str, Path]]:
    """tensor-router (analytics on) with chat-a loaded on the real llama-server; the demo
    model files. `launcher`: the command that runs the router (bench/profile_proxy.py)."""
    from router.demo_models import generate_demo_models

    files = generate_demo_models(wd / "demo", whisper=False)
    router = c.Router(
        wd / "router",
        {"chat-a": files["chat-a"]},
        llama_wrapper(wd / "llama-server", llama),
        analytics=True,
        extra_kcpps={"chat-a": {"contextsize": 2048}},
        launcher=launcher,
    )
    stack.callback(router.stop)
    router.start()
    router.load("chat-a")
    return router, files


def run_arm(url: str, block: float, procs: dict[str, list[psutil.Process]]) -> dict[str, Any]:
    """Every scenario once; with each, the CPU per request of the router and of llama-server
    (the router's is what it costs a 2-core box, whoever's latency it lands in)."""
    one, stream = json.dumps(ONE).encode(), json.dumps(STREAM).encode()
    blocks = {
        "1 conn, http.client": lambda: run_block("http.client", url, PATH, one, block),
        "1 conn, httpx": lambda: run_block("httpx", url, PATH, one, block),
        "8 conns, wrk": lambda: c.load_test(url + PATH, one.decode(), 8, block),
        "64-token stream": lambda: run_block("http.client", url, PATH, stream, block),
    }
    out = {}
    for name, run in blocks.items():
        meters = {who: c.CpuMeter(p) for who, p in procs.items()}
        res = run()
        n = max(1, int(res.get("requests") or 1))
        for who, meter in meters.items():
            res[f"{who}_cpu_us"] = meter.percent() / 100.0 * (time.monotonic() - meter.t0) / n * 1e6
        out[name] = res
    return out


def summarize(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per scenario: p50 per arm, added p50 over direct, and the target ratios."""
    out: dict[str, Any] = {}
    for sc in SCENARIOS:
        blocks = {arm: [rep[sc] for rep in reps] for arm, reps in results.items()}
        s: dict[str, Any] = {"arms": {}}
        for arm, reps in blocks.items():
            s["arms"][arm] = {
                "p50_ms": c.med([r["p50_ms"] for r in reps]),
                "added_p50_ms": c.per_rep(blocks, arm, "direct", "p50_ms", c.diff),
                "client_cpu_us": c.med([r.get("client_cpu_us") for r in reps]),
                "header_p50_ms": c.med([r.get("header_p50_ms") for r in reps]),
                "backend_p50_ms": c.med([r.get("backend_p50_ms") for r in reps]),
                "router_cpu_us": c.med([r.get("router_cpu_us") for r in reps]),
                "llama_cpu_us": c.med([r.get("llama_cpu_us") for r in reps]),
            }
        added = {
            a: [r["p50_ms"] - d["p50_ms"] for r, d in zip(v, blocks["direct"], strict=False)]
            for a, v in blocks.items()
        }
        s["router_over_nginx"] = _ratio(added, "router", "nginx")
        s["llama_router_over_router"] = _ratio(added, "llama-router", "router")
        if "llama-child" in blocks:
            s["llama_router_over_child_ms"] = c.per_rep(
                blocks, "llama-router", "llama-child", "p50_ms", c.diff
            )
        headers = [r.get("header_p50_ms") for r in blocks["router"]]
        if all(h is not None for h in headers):
            s["header_minus_added_ms"] = c.med(
                [h - a for h, a in zip(headers, added["router"], strict=False)]
            )
        out[sc] = s
    return out


def _ratio(added: dict[str, list[float]], num: str, den: str) -> float | None:
    if num not in added or den not in added:
        return None
    return c.med([n / d for n, d in zip(added[num], added[den], strict=False) if d > 0])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    llama = c.llama_server_path()
    if not llama or not c.nginx_path():
        skipped: dict[str, Any] = {
            "skipped": {"all": c.skip("real backend", "llama-server" if not llama else "nginx")}
        }
        c.save(opts, "real_backend", skipped)
        return skipped
    with c.workdir("real-backend") as wd, c.Stack() as stack:
        router, files = start_router(wd, stack, llama)
        direct = f"http://127.0.0.1:{router.backend('chat-a')['port']}"
        nginx, nginx_url = start_nginx_proxy(wd, int(direct.rsplit(":", 1)[1]))
        stack.proc(nginx)
        urls = {"direct": direct, "router": router.url, "nginx": nginx_url}
        urls.update(start_llama_router(stack, wd, llama, files["chat-a"]))
        backend = int(router.backend("chat-a")["pid"])
        assert router.proc is not None
        procs = {"router": c.tree(router.proc.pid, exclude={backend}), "llama": c.tree(backend)}
        for url in urls.values():  # warm-up: caches, first allocations, pooled connections
            run_arm(url, 0.5, procs)
        results = c.interleave(
            list(urls), opts.reps, lambda arm, rep: run_arm(urls[arm], opts.block, procs)
        )
    data: dict[str, Any] = {"summary": summarize(results), "blocks": results}
    data["client"] = "http.client, httpx, wrk"
    c.save(opts, "real_backend", data)
    return data


# ---------------------------------------------------------------- report


def target_rows(d: dict[str, Any]) -> list[tuple[str, str, Any, float, bool, str, int]]:
    """(goal, target text, value, limit, higher is better, unit, digits) for bench/report.py."""
    s = d.get("summary") or {}
    rows = []
    for sc in SCENARIOS:
        x = s.get(sc) or {}
        added = (x.get("arms", {}).get("router") or {}).get("added_p50_ms")
        rows += [
            (
                f"Real llama-server, {sc}: router-added p50",
                "<= 0.5 ms",
                added,
                0.5,
                False,
                " ms",
                3,
            ),
            (
                f"Real llama-server, {sc}: router / nginx added",
                "<= 3x",
                x.get("router_over_nginx"),
                3.0,
                False,
                "x",
                1,
            ),
            (
                f"Real llama-server, {sc}: llama router mode / router added",
                ">= 4x",
                x.get("llama_router_over_router"),
                4.0,
                True,
                "x",
                1,
            ),
        ]
    hdr = (s.get("1 conn, http.client") or {}).get("header_minus_added_ms")
    rows.append(
        (
            "`X-Router-Overhead-Ms` p50 - measured added p50 (http.client)",
            "within 0.1 ms",
            abs(hdr) if hdr is not None else None,
            0.1,
            False,
            " ms",
            3,
        )
    )
    return rows


def report_lines(d: dict[str, Any], instant: dict[str, Any] | None = None) -> list[str]:
    if "summary" not in d:
        return ["", f"Real-backend latency: {d.get('skipped') or d.get('crashed', '')[-300:]}"]
    s = d["summary"]
    arms = list(s[SCENARIOS[0]]["arms"])
    L = ["", "### Real llama-server (demo model, `/v1/completions`), one interleaved run", ""]
    L.append(
        "| Scenario | "
        + " | ".join(arms)
        + " | router/nginx | llama-router/router | header - added |"
    )
    L.append("|---|" + "---|" * (len(arms) + 3))
    for sc, x in s.items():
        cells = [_cell(x["arms"][a]) for a in arms]
        L.append(
            f"| {sc} | " + " | ".join(cells) + f" | {_x(x.get('router_over_nginx'))} | "
            f"{_x(x.get('llama_router_over_router'))} | {c_(x.get('header_minus_added_ms'), 3)} |"
        )
    own = s["1 conn, http.client"]["arms"]
    cpu = {sc.split(", ")[1]: s[sc]["arms"]["direct"]["client_cpu_us"] for sc in SCENARIOS[:2]}
    L.append(
        "\nCells: p50 ms (added over direct), the 64-token stream timed to its last byte. "
        f"Client CPU per request (the client library's own cost, direct arm): http.client "
        f"{c_(cpu['http.client'], 0)} us, httpx {c_(cpu['httpx'], 0)} us. llama-server's own "
        f"`timings` p50: direct {c_(own['direct']['backend_p50_ms'], 3)} ms, through the router "
        f"{c_(own['router']['backend_p50_ms'], 3)} ms. Router's `X-Router-Overhead-Ms` p50 "
        f"{c_(own['router']['header_p50_ms'], 3)} ms. llama-server router mode over its own child: "
        f"{c_(s['1 conn, http.client'].get('llama_router_over_child_ms'), 3)} ms."
    )
    L.append("\nCPU per request, us (router process / tensor-router's llama-server), by arm:")
    for sc, x in s.items():
        L.append(
            f"{sc}: "
            + ", ".join(
                f"{a} {c_(v['router_cpu_us'], 0)} / {c_(v['llama_cpu_us'], 0)}"
                for a, v in x["arms"].items()
            )
            + "."
        )
    if instant and "summary" in instant:
        L += ["", "### Added p50 by upstream, ms: instant (nginx `return 200`, wrk) and real", ""]
        L.append(
            "| Arm | instant, wrk | real, http.client | real, httpx | real, 8 conns | real, stream |"
        )
        L.append("|---|---|---|---|---|---|")
        for arm in ("router", "nginx"):
            fast = instant["summary"]["arms"].get(arm, {}).get("added_p50_ms")
            real = [s[sc]["arms"].get(arm, {}).get("added_p50_ms") for sc in SCENARIOS]
            L.append(f"| {arm} | {c_(fast, 3)} | " + " | ".join(c_(v, 3) for v in real) + " |")
    return L


def _cell(arm: dict[str, Any]) -> str:
    return f"{c_(arm['p50_ms'], 3)} (+{c_(arm['added_p50_ms'], 3)})"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}x"


def c_(v: Any, nd: int) -> str:
    return "n/a" if v is None else f"{v:.{nd}f}"


if __name__ == "__main__":
    main()
