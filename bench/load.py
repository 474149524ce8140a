"""Load generators (wrk, or a Python client when wrk is missing) and CPU accounting of
the arms' processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil


def wrk_path() -> str | None:
    return shutil.which("wrk")


# ---------------------------------------------------------------- CPU accounting


def tree(pid: int, exclude: set[int] = frozenset()) -> list[psutil.Process]:  # type: ignore[assignment]
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    out = []
    for p in procs:
        if p.pid in exclude:
            continue
        with contextlib.suppress(psutil.Error):
            if any(a.pid in exclude for a in p.parents()):
                continue
            out.append(p)
    return out


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


class CpuMeter:
    """CPU% (100 = one core) of a fixed set of processes over a block."""

    def __init__(self, procs: list[psutil.Process]) -> None:
        self.procs = procs
        self.t0 = time.monotonic()
        self.c0 = cpu_seconds(procs)

    def percent(self) -> float:
        dt = time.monotonic() - self.t0
        return 100.0 * (cpu_seconds(self.procs) - self.c0) / dt if dt > 0 else 0.0


# ---------------------------------------------------------------- load generators

CHAT_BODY = json.dumps(
    {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
)

WRK_LUA = """
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {{"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"mean_us":%f,'
    .. '"errors":%d,"non2xx":%d}}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.mean, e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def lua_quote(text: str) -> str:
    return "[==[" + text + "]==]"


def run_wrk(url: str, body: str, conns: int, seconds: float, threads: int = 1) -> dict[str, Any]:
    wrk = wrk_path()
    assert wrk
    script = Path(tempfile.mkstemp(suffix=".lua", prefix="bench-wrk-")[1])
    script.write_text(WRK_LUA.format(body=lua_quote(body)))
    try:
        res = subprocess.run(
            [
                wrk,
                f"-t{threads}",
                f"-c{conns}",
                f"-d{max(1, round(seconds))}s",
                "--timeout",
                "10s",
                "-s",
                str(script),
                url,
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
    finally:
        script.unlink(missing_ok=True)
    m = re.search(r"BENCHJSON (\{.*\})", res.stdout)
    if not m:
        raise RuntimeError(f"wrk failed: {res.stdout[-500:]} {res.stderr[-500:]}")
    data = json.loads(m.group(1))
    data["rps"] = data["requests"] / (data["duration_us"] / 1e6)
    data["p50_ms"] = data["p50_us"] / 1000
    data["p99_ms"] = data["p99_us"] / 1000
    return data


async def _py_load(url: str, body: str, conns: int, seconds: float) -> dict[str, Any]:
    import aiohttp

    lat: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds
    data = body.encode()
    hdrs = {"Content-Type": "application/json"}
    conn = aiohttp.TCPConnector(limit=conns, force_close=False)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker() -> None:
            nonlocal errors
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                try:
                    async with session.post(url, data=data, headers=hdrs) as resp:
                        await resp.read()
                        if resp.status != 200:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1
                lat.append(time.perf_counter() - t0)

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(conns)))
        elapsed = time.monotonic() - t0
    lat.sort()
    pct = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000) if lat else (lambda q: 0.0)
    return {
        "requests": len(lat),
        "rps": len(lat) / elapsed,
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "errors": errors,
        "non2xx": 0,
    }


def load_test(url: str, body: str, conns: int, seconds: float) -> dict[str, Any]:
    """wrk when installed (preferred, native client), else the Python async client."""
    if wrk_path():
        res = run_wrk(url, body, conns, seconds)
        res["client"] = "wrk"
    else:
        res = asyncio.run(_py_load(url, body, conns, seconds))
        res["client"] = "python-aiohttp"
    return res


def client_name() -> str:
    return "wrk" if wrk_path() else "python-aiohttp (wrk not installed: apt-get install -y wrk)"
