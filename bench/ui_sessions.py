"""The proxy's added p50 latency with 10 WebUI tabs open (10 `/router/v1/events` streams)
versus none, in the same run (target: within 5 %, a ratio of at most 1.05).

One router (trusted_lan, analytics off, as bench/latency.py) in front of the nginx
`return 200` upstream it launched (bench/upstream.py; the Python upstream without nginx).
Arms, interleaved ABAB with the order rotated: `direct` (the upstream), `router` (no
subscriber), `router_10_tabs` (the same router while a separate process holds 10 event
streams open and reads every event, as 10 browser tabs would). Client: wrk -c1 (Python client
without wrk). Reported: each arm's p50 minus direct's, per repetition, and the ratio of the
two router arms' added p50 (median over repetitions); the router's CPU time per request in
each arm and their ratio (steadier than latency when other work shares the cores); the
events the tabs received.

`python -m bench.ui_sessions [--quick] [--reps N] [--block S]`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench import common as c
from bench.arms import start_arms

PATH = "/v1/chat/completions"
TABS = 10


async def _hold_streams(url: str, tabs: int, ready: Path) -> list[int]:
    """The subscriber process: `tabs` event streams read until SIGTERM; events per tab."""
    import aiohttp  # the router's own dependency

    received = [0] * tabs
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    announced = False

    async def tab(session: aiohttp.ClientSession, i: int) -> None:
        nonlocal announced
        async with session.get(url + "/router/v1/events") as response:
            async for line in response.content:
                if line.startswith(b"data:"):
                    received[i] += 1
                    if not announced and all(received):  # every tab has its `hello`
                        announced = True
                        await asyncio.to_thread(ready.touch)

    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        tasks = [asyncio.create_task(tab(session, i)) for i in range(tabs)]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return received


class Tabs:
    """The 10 open tabs, as a child process started and stopped around each block."""

    def __init__(self, wd: Path, url: str) -> None:
        self.wd, self.url = wd, url
        self.received: list[list[int]] = []
        self.proc: c.Proc | None = None

    def open(self, rep: int) -> None:
        self.counts = self.wd / f"tabs-{rep}.json"
        argv = [c.PY, "-m", "bench.ui_sessions", "--hold", self.url, str(TABS), str(self.counts)]
        env = {**os.environ, "PYTHONPATH": str(c.ROOT)}  # the child runs in the work folder
        self.proc = c.Proc(argv, f"tabs-{rep}", self.wd, env=env)
        deadline = time.monotonic() + 20
        while not self.counts.with_suffix(".ready").exists():
            if time.monotonic() > deadline or not self.proc.alive():
                raise RuntimeError(f"the tabs did not connect: {self.proc.tail()}")
            time.sleep(0.05)

    def close(self) -> None:
        assert self.proc is not None
        self.proc.stop(10)
        if self.counts.exists():
            self.received.append(json.loads(self.counts.read_text()))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--hold"]:
        counts = Path(args[3])
        received = asyncio.run(_hold_streams(args[1], int(args[2]), counts.with_suffix(".ready")))
        counts.write_text(json.dumps(received))
        return {}
    opts = c.Opts.parse(args, __doc__ or "")
    mode = "nginx" if c.nginx_path() else "stream"
    with c.workdir("ui-sessions") as wd, c.Stack() as stack:
        arms = start_arms(stack, wd, mode, with_proxies=False)
        urls = {**arms.urls, "router_10_tabs": arms.router.url}
        tabs = Tabs(wd, arms.router.url)
        for url in set(urls.values()):  # warm-up
            c.load_test(url + PATH, c.CHAT_BODY, 1, 1)

        def run(arm: str, rep: int) -> dict[str, Any]:
            if arm == "router_10_tabs":
                tabs.open(rep)
            meter = c.CpuMeter(arms.cpu_procs["router"])
            try:
                res = c.load_test(urls[arm] + PATH, c.CHAT_BODY, 1, opts.block)
                # Router CPU per request: steadier than latency on a shared, busy machine.
                cpu_s = c.cpu_seconds(meter.procs) - meter.c0
                res["router_cpu_us_per_request"] = cpu_s / max(1, res["rps"] * opts.block) * 1e6
                return res
            finally:
                if arm == "router_10_tabs":
                    tabs.close()

        results = c.interleave(["direct", "router", "router_10_tabs"], opts.reps, run)
    added = {
        arm: c.per_rep(results, arm, "direct", "p50_ms", c.diff)
        for arm in ("router", "router_10_tabs")
    }
    ratios = [
        (t["p50_ms"] - d["p50_ms"]) / (r["p50_ms"] - d["p50_ms"])
        for d, r, t in zip(
            results["direct"], results["router"], results["router_10_tabs"], strict=False
        )
        if r["p50_ms"] - d["p50_ms"] > 0
    ]
    cpu = {
        arm: c.med([r["router_cpu_us_per_request"] for r in results[arm]])
        for arm in ("router", "router_10_tabs")
    }
    data = {
        "upstream": mode,
        "router_cpu_us_per_request": cpu,
        "tabs_over_none_cpu_per_request": c.per_rep(
            results, "router_10_tabs", "router", "router_cpu_us_per_request", c.ratio
        ),
        "client": c.client_name(),
        "tabs": TABS,
        "added_p50_ms": added,
        "tabs_over_none_added_p50": c.med(ratios),
        "per_rep_ratios": ratios,
        "events_received_per_tab": tabs.received,
        "target_ratio": 1.05,
        "blocks": results,
    }
    c.save(opts, "ui_sessions", data)
    c.log(f"ui_sessions: added p50 {added}, ratio {data['tabs_over_none_added_p50']}")
    return data


if __name__ == "__main__":
    main()
