"""Site inventory: cold and warm inventory of 1,000 model files, and the latency the proxy adds
while a cold inventory hashes a large file set beside it.

A real router process (router.yaml with `models.file_roots`) in front of the bench upstream.
Phase 1: 1,000 small `.gguf`-named files; the first `?include_files=true` hashes every one
(cold), later ones answer from the store's hash cache (warm; target under 100 ms). Phase 2: a
few large files are added and a cold inventory hashes them in the background while one
connection sends chat requests; the p50 of those requests is compared with the p50 when idle,
each minus the upstream's own p50 (direct). Everything is written under a temp folder and
removed at the end. `python -m bench.inventory [--quick]`.
"""

from __future__ import annotations

import http.client
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench import common as c

SMALL_FILES = 1000
SMALL_BYTES = 64 * 1024
PATH = "/v1/chat/completions"


def write_files(folder: Path, count: int, size: int, prefix: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    block = os.urandom(min(size, 1 << 20))
    for i in range(count):
        with (folder / f"{prefix}{i:04d}.gguf").open("wb") as fh:
            left = size
            fh.write(i.to_bytes(8, "little"))  # every file differs: no two share a hash
            left -= 8
            while left > 0:
                fh.write(block[: min(left, len(block))])
                left -= len(block)


def start_router(wd: Path) -> tuple[c.Proc, str]:
    (wd / "kcpps").mkdir()
    (wd / "models" / "chat.gguf").write_bytes(b"GGUF")
    (wd / "kcpps" / "chat.kcpps").write_text(
        '{"backend_mode": "llama_sdcpp", "model_param": "../models/chat.gguf"}'
    )
    wrapper = c.write_wrapper(wd / "llama-upstream", "nginx" if c.nginx_path() else "stream")
    port = c.free_port()
    (wd / "router.yaml").write_text(
        "security: {profile: trusted_lan}\n"
        f"server: {{bind: '127.0.0.1:{port}'}}\n"
        "models: {config_dir: ./kcpps, file_roots: [./models]}\n"
        f"llama: {{binary_path: {str(wrapper)!r}}}\n"
        "analytics: {enabled: false, database_path: ./data/router.sqlite}\n"
    )
    argv = [c.PY, "-m", "router.cli", "start", "--config", str(wd / "router.yaml")]
    proc = c.Proc([*argv, "--log-level", "warning"], "router", wd)
    url = f"http://127.0.0.1:{port}"
    c.wait_http(f"{url}/router/v1/status", proc, 60)
    return proc, url


def inventory_ms(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    status, body, _ = c.http_json(
        "GET", f"{url}/router/v1/site/inventory?include_files=true", None, 600
    )
    if status != 200:
        raise RuntimeError(f"inventory: {status} {body}")
    return (time.perf_counter() - started) * 1000, len(body["files"])


def latencies(url: str, until: threading.Event | None, seconds: float) -> list[float]:
    """Sequential chat requests on one connection until `until` is set (or `seconds` pass)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    out: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (until is not None and until.is_set()):
        started = time.perf_counter()
        conn.request("POST", PATH, c.CHAT_BODY, {"Content-Type": "application/json"})
        conn.getresponse().read()
        out.append((time.perf_counter() - started) * 1000)
    conn.close()
    return out


def phase_small(url: str, wd: Path, reps: int) -> dict[str, Any]:
    write_files(wd / "models" / "small", SMALL_FILES, SMALL_BYTES, "s")
    cold, files = inventory_ms(url)
    warm = [inventory_ms(url)[0] for _ in range(max(5, reps * 3))]
    c.log(
        f"inventory of {files} files: cold {cold:.0f} ms, warm p50 {statistics.median(warm):.1f} ms"
    )
    return {
        "files": files,
        "cold_ms": cold,
        "warm_p50_ms": statistics.median(warm),
        "warm_ms": warm,
    }


def phase_large(url: str, wd: Path, quick: bool) -> dict[str, Any]:
    status, body, _ = c.http_json("GET", f"{url}/router/v1/status")
    backend = body["runtimes"][0]
    direct = f"http://127.0.0.1:{backend['port']}"
    count, size = (4, 128 << 20) if quick else (8, 256 << 20)
    idle_s = 2.0 if quick else 5.0
    idle = latencies(url, None, idle_s)
    direct_idle = latencies(direct, None, idle_s)
    write_files(wd / "models" / "large", count, size, "L")
    done = threading.Event()
    result: dict[str, float] = {}

    def run() -> None:
        result["cold_ms"] = inventory_ms(url)[0]
        done.set()

    worker = threading.Thread(target=run)
    worker.start()
    busy = latencies(url, done, 600)
    worker.join()
    p50 = statistics.median
    out = {
        "large_files": count,
        "large_gib": count * size / (1 << 30),
        "cold_inventory_ms": result["cold_ms"],
        "direct_p50_ms": p50(direct_idle),
        "router_idle_p50_ms": p50(idle),
        "router_hashing_p50_ms": p50(busy),
        "added_idle_p50_ms": p50(idle) - p50(direct_idle),
        "added_hashing_p50_ms": p50(busy) - p50(direct_idle),
        "requests_while_hashing": len(busy),
    }
    c.log(
        f"{out['large_gib']:.1f} GiB hashed in {result['cold_ms'] / 1000:.1f} s; proxy added p50 "
        f"idle {out['added_idle_p50_ms']:.2f} ms, while hashing {out['added_hashing_p50_ms']:.2f} ms "
        f"({len(busy)} requests)"
    )
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    with c.workdir("inventory") as wd, c.Stack() as stack:
        (wd / "models").mkdir()
        proc, url = start_router(wd)
        stack.callback(proc.stop)
        c.http_json("POST", f"{url}/router/v1/load", {"model": "chat"}, 120)
        data = {"small": phase_small(url, wd, opts.reps), "large": phase_large(url, wd, opts.quick)}
    c.save(opts, "inventory", data)
    return data


if __name__ == "__main__":
    main()
