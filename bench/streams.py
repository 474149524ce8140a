"""P2, P2b, P3, P4: streamed chat completions through each arm, 1, 16 and 64 concurrent streams.

Upstream: bench/upstream.py in stream mode (precomputed SSE frames), launched by the router;
every arm reuses that process. Each event's content is the upstream's CLOCK_MONOTONIC time at
emission, so the client measures each event's delay (arrival - emission) exactly. Scenarios:
one stream as fast as the upstream can emit (throughput of one stream), and 1/16/64 streams
paced at 50 tokens/s with a 200 ms time to first token. Client: Python aiohttp (wrk cannot
time events), reading with iter_any so coalesced events are seen as such.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from bench import common as c
from bench.arms import start_arms

PATH = "/v1/chat/completions"
EVENT = re.compile(rb'"content":\s*"(\d+)')

# label, concurrent streams, tokens/s per stream (0 = as fast as possible), TTFT ms, tokens
SCENARIOS = [
    ("1 stream, unpaced", 1, 0, 0, 2000),
    ("1 stream @50 tok/s", 1, 50, 200, 50),
    ("16 streams @50 tok/s", 16, 50, 200, 50),
    ("64 streams @50 tok/s", 64, 50, 200, 50),
]


def pct(vals: list[float], q: float) -> float | None:
    if not vals:
        return None
    vals = sorted(vals)
    return vals[min(len(vals) - 1, int(q * len(vals)))]


async def block(url: str, conns: int, rate: int, ttft_ms: int, tokens: int, seconds: float) -> dict:
    import aiohttp

    body = json.dumps(
        {
            "model": "fast",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": tokens,
            "seed": rate * 10000 + ttft_ms,
        }
    ).encode()
    hdrs = {"Content-Type": "application/json"}
    delays: list[int] = []
    ttfts: list[float] = []
    counted = 0
    coalesced = 0
    errors = 0
    start = time.monotonic_ns()
    end = start + int(seconds * 1e9)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

        async def one_stream() -> None:
            nonlocal counted, coalesced, errors
            sent = time.monotonic_ns()
            first = True
            async with session.post(url, data=body, headers=hdrs) as resp:
                if resp.status != 200:
                    errors += 1
                    await resp.read()
                    return
                buf = b""
                async for chunk in resp.content.iter_any():
                    now = time.monotonic_ns()
                    buf += chunk
                    cut = buf.rfind(b"\n\n")
                    if cut < 0:
                        continue
                    done, buf = buf[: cut + 2], buf[cut + 2 :]
                    n = 0
                    for m in EVENT.finditer(done):
                        n += 1
                        if now < end:
                            delays.append(now - int(m.group(1)))
                            counted += 1
                    if n and first:
                        ttfts.append((now - sent) / 1e6)
                        first = False
                    coalesced += max(0, n - 1)
                    if now >= end:
                        return

        async def worker() -> None:
            nonlocal errors
            while time.monotonic_ns() < end:
                try:
                    await asyncio.wait_for(
                        one_stream(), max(0.01, (end - time.monotonic_ns()) / 1e9 + 1)
                    )
                except (TimeoutError, aiohttp.ClientError):
                    if time.monotonic_ns() < end:
                        errors += 1

        await asyncio.gather(*(worker() for _ in range(conns)))
    ms = [d / 1e6 for d in delays]
    return {
        "tok_s": counted / seconds,
        "events": counted,
        "delay_p50_ms": pct(ms, 0.5),
        "delay_p99_ms": pct(ms, 0.99),
        "ttft_p50_ms": pct(ttfts, 0.5),
        "ttft_p99_ms": pct(ttfts, 0.99),
        "coalesced": coalesced,
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    seconds = max(opts.block, 2.0 if opts.quick else 5.0)
    scenarios = SCENARIOS if not opts.quick else [SCENARIOS[0], SCENARIOS[2], SCENARIOS[3]]
    c.log("streams: upstream=python stream (precomputed frames), client=python aiohttp")
    out: dict[str, Any] = {"scenarios": {}}
    with c.workdir("streams") as wd, c.Stack() as stack:
        arms = start_arms(stack, wd, "stream")
        names = list(arms.urls)
        for arm in names:  # warm-up
            asyncio.run(block(arms.urls[arm] + PATH, 4, 200, 0, 20, 0.5))
        for label, conns, rate, ttft, tokens in scenarios:
            c.log(f"scenario {label}")

            def run(arm: str, rep: int, conns=conns, rate=rate, ttft=ttft, tokens=tokens) -> dict:
                meter, bmeter = c.CpuMeter(arms.cpu_procs[arm]), c.CpuMeter(arms.backend_procs)
                res = asyncio.run(block(arms.urls[arm] + PATH, conns, rate, ttft, tokens, seconds))
                res["cpu_pct"], res["backend_cpu_pct"] = meter.percent(), bmeter.percent()
                return res

            results = c.interleave(names, opts.reps, run)
            summary = {}
            for arm in names:
                summary[arm] = {
                    "tok_s": c.med([r["tok_s"] for r in results[arm]]),
                    "tok_s_ratio": c.per_rep(results, arm, "direct", "tok_s", c.ratio),
                    "ttft_p50_ms": c.med([r["ttft_p50_ms"] for r in results[arm]]),
                    "ttft_ratio": c.per_rep(results, arm, "direct", "ttft_p50_ms", c.ratio),
                    "ttft_added_p50_ms": c.per_rep(results, arm, "direct", "ttft_p50_ms", c.diff),
                    "delay_p50_ms": c.med([r["delay_p50_ms"] for r in results[arm]]),
                    "delay_p99_ms": c.med([r["delay_p99_ms"] for r in results[arm]]),
                    "delay_added_p50_ms": c.per_rep(results, arm, "direct", "delay_p50_ms", c.diff),
                    "delay_added_p99_ms": c.per_rep(results, arm, "direct", "delay_p99_ms", c.diff),
                    "coalesced": sum(r["coalesced"] for r in results[arm]),
                    "errors": sum(r["errors"] for r in results[arm]),
                    "cpu_pct": c.med([r["cpu_pct"] for r in results[arm]]),
                    "backend_cpu_pct": c.med([r["backend_cpu_pct"] for r in results[arm]]),
                }
            out["scenarios"][label] = {
                "streams": conns,
                "rate": rate,
                "ttft_ms": ttft,
                "tokens": tokens,
                "summary": summary,
                "blocks": results,
            }
    data = {"client": "python-aiohttp", "block_s_streams": seconds, **out, "skipped": arms.skipped}
    c.save(opts, "streams", data)
    return data


if __name__ == "__main__":
    main()
