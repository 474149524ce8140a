"""P-lending (issue 16): what a lending link buys a backlog, and what links cost a model without any.

Two routers on loopback (`trusted_lan`): the master owns `slow` (fake backend, one generation at
a time, `SLOW_RATE` tokens/s) and `plain` (no token delay); the slave has `fast`, twice as fast
per token. Drain: 200 non-streaming requests for `slow` sent at once to the master, timed until
the last answer, with the link `slow@m -> fast@s1` and without it (interleaved, the order
rotated each repetition); target with / without <= 0.6. Added latency: sequential requests for
`plain` on the master (wrk -c1 or the Python client) with the link present and absent, minus
`plain`'s backend called directly, interleaved; target present / absent <= 1.02.

The fake backend is tests/fakes/fake_backend.py (a separate program, as in the tests). Not a
test: it reports and never fails.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from pathlib import Path
from typing import Any

import psutil

from bench import common as c

PATH = "/v1/chat/completions"
LINKS = "/router/v1/site/text-routing-groups"
TOKEN = "bench-lending-token-0123456789abcdef"
FAKE = c.ROOT / "tests" / "fakes" / "fake_backend.py"
TOKENS = 8
SLOW_RATE, FAST_RATE = 80, 160  # tokens/s: 0.1 s and 0.05 s a request
LINK = {
    "anchor": {"node_id": "m", "model_id": "slow"},
    "lends_to": [{"node_id": "s1", "model_id": "fast"}],
    "borrows_from": [],
}
PLAIN_BODY = json.dumps(
    {"model": "plain", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
)


def _wrapper(path: Path) -> Path:
    """`llama.binary_path`: the fake backend, with each model's token rate."""
    rates = {"slow.gguf": SLOW_RATE, "fast.gguf": FAST_RATE}
    cases = "".join(
        f"    {name}) extra=(--token-rate {rate} --tokens {TOKENS} --parallel 1) ;;\n"
        for name, rate in rates.items()
    )
    path.write_text(
        "#!/bin/bash\nextra=()\n"
        f'for a in "$@"; do\n  case "${{a##*/}}" in\n{cases}  esac\ndone\n'
        f"exec {shlex.quote(c.PY)} {shlex.quote(str(FAKE))} --family llamacpp "
        '"$@" "${extra[@]}"\n'
    )
    path.chmod(0o755)
    return path


def _yaml(cluster: dict[str, Any]) -> str:
    return "cluster: " + json.dumps({**cluster, "token": TOKEN}) + "\n"


def start(stack: c.Stack, wd: Path) -> tuple[c.Router, c.Router]:
    files = {}
    for name in ("slow", "plain", "fast"):
        files[name] = wd / f"{name}.gguf"
        files[name].write_bytes(name.encode())
    wrapper = _wrapper(wd / "fake-llama")
    mport, sport = c.free_port(), c.free_port()
    murl, surl = f"http://127.0.0.1:{mport}", f"http://127.0.0.1:{sport}"
    ctx = {"contextsize": 4096}
    slave = c.Router(
        wd / "slave",
        {"fast": files["fast"]},
        wrapper,
        port=sport,
        max_per_peer=1024,
        extra_kcpps={"fast": ctx},
    )
    slave.extra_yaml = _yaml(
        {
            "role": "slave",
            "node_id": "s1",
            "public_url": surl,
            "master_url": murl,
            "sync_interval": "1s",
        }
    )
    master = c.Router(
        wd / "master",
        {"slow": files["slow"], "plain": files["plain"]},
        wrapper,
        port=mport,
        max_per_peer=1024,
        extra_kcpps={"slow": ctx},
    )
    master.extra_yaml = _yaml(
        {
            "role": "master",
            "node_id": "m",
            "slave_urls": [surl],
            "public_url": murl,
            "health_interval": "1s",
        }
    )
    for router in (master, slave):
        stack.callback(router.stop)
        router.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the slave's models are known on the master
        _, body, _ = c.http_json("GET", f"{murl}{LINKS}?node_id=m&model_id=slow")
        if any(x.get("model_id") == "fast" for x in (body or {}).get("candidates", [])):
            return master, slave
        time.sleep(0.2)
    raise RuntimeError("the slave's models never reached the master")


def set_link(master: c.Router, present: bool) -> None:
    if present:
        status, body, _ = c.http_json("POST", master.url + LINKS, LINK)
        if status != 200:
            raise RuntimeError(f"link: {status} {body}")
    else:
        c.http_json("DELETE", master.url + LINKS + "?node_id=m&model_id=slow")


async def drain(url: str, n: int) -> dict[str, Any]:
    """`n` requests for `slow` at once; the time until the last answer, and who served them."""
    import aiohttp

    body = {"model": "slow", "max_tokens": TOKENS, "messages": [{"role": "user", "content": "hi"}]}
    timeout = aiohttp.ClientTimeout(total=900)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as session:

        async def one() -> tuple[int, bool]:
            async with session.post(url + PATH, json=body) as r:
                await r.read()
                # The owner's backend names its model file; a lent answer carries no such header.
                return r.status, r.headers.get("X-Fake-Model", "").endswith("slow.gguf")

        started = time.monotonic()
        got = await asyncio.gather(*(one() for _ in range(n)))
        elapsed = time.monotonic() - started
    return {
        "drain_s": round(elapsed, 3),
        "errors": sum(1 for status, _ in got if status != 200),
        "served_by_owner": sum(1 for status, own in got if status == 200 and own),
    }


def drain_arms(opts: c.Opts, master: c.Router, slave: c.Router, n: int) -> dict[str, Any]:
    master.load("slow")
    slave.load("fast")

    def run(arm: str, rep: int) -> dict[str, Any]:
        set_link(master, arm == "link")
        res = asyncio.run(drain(master.url, n))
        c.log(
            f"  rep {rep} {arm}: drain {res['drain_s']:.1f} s, owner served "
            f"{res['served_by_owner']}/{n}, errors {res['errors']}"
        )
        return res

    results = c.interleave(["no_link", "link"], max(1, opts.reps - 1), run)
    return {
        "requests": n,
        "drain_s": {a: c.med([r["drain_s"] for r in results[a]]) for a in results},
        "ratio_link_over_no_link": c.per_rep(results, "link", "no_link", "drain_s", c.ratio),
        "served_by_owner": {a: [r["served_by_owner"] for r in results[a]] for a in results},
        "errors": {a: sum(r["errors"] for r in results[a]) for a in results},
    }


def latency_arms(opts: c.Opts, master: c.Router) -> dict[str, Any]:
    master.load("plain")  # the same lane as `slow`: `plain` now holds it
    direct = f"http://127.0.0.1:{master.backend('plain')['port']}{PATH}"
    for url in (direct, master.url + PATH):
        c.load_test(url, PLAIN_BODY, 1, 1)

    assert master.proc is not None
    router_proc = [psutil.Process(master.proc.pid)]

    def run(arm: str, rep: int) -> dict[str, Any]:
        if arm == "direct":
            return c.load_test(direct, PLAIN_BODY, 1, opts.block)
        set_link(master, arm == "links_present")
        meter = c.CpuMeter(router_proc)
        res = c.load_test(master.url + PATH, PLAIN_BODY, 1, opts.block)
        # Router CPU per request: steadier than latency on a shared, busy machine.
        cpu_s = c.cpu_seconds(meter.procs) - meter.c0
        res["router_cpu_us"] = cpu_s / max(1, res["rps"] * opts.block) * 1e6
        return res

    arms = ["direct", "links_absent", "links_present"]
    results = c.interleave(arms, opts.reps * 2, run)
    added = {a: c.per_rep(results, a, "direct", "p50_ms", c.diff) for a in arms[1:]}
    vals = []
    for p, a, d in zip(
        *(results[x] for x in ("links_present", "links_absent", "direct")), strict=False
    ):
        if a["p50_ms"] - d["p50_ms"] > 0:
            vals.append((p["p50_ms"] - d["p50_ms"]) / (a["p50_ms"] - d["p50_ms"]))
    return {
        "client": c.client_name(),
        "p50_ms": {a: c.med([r["p50_ms"] for r in results[a]]) for a in arms},
        "added_p50_ms": added,
        "added_ratio_present_over_absent": c.med(vals),
        "p50_ratio_present_over_absent": c.per_rep(
            results, "links_present", "links_absent", "p50_ms", c.ratio
        ),
        "router_cpu_us_per_request": {
            a: c.med([r["router_cpu_us"] for r in results[a]]) for a in arms[1:]
        },
        "cpu_ratio_present_over_absent": c.per_rep(
            results, "links_present", "links_absent", "router_cpu_us", c.ratio
        ),
    }


def serving_cost(n: int = 100_000) -> dict[str, Any]:
    """In process: one unlinked request's pass through the gate check (`borrowed.ungated`),
    with no link on its lane and with a link between two other models on it, in us."""
    from types import SimpleNamespace

    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from router.domain import Lane
    from router.lending import GATES, LINKS, RESTORE
    from router.lending import helper as borrowed
    from router.lending.gate import Gates
    from router.lending.links import Link, LinkTable
    from router.lending.restore import Restorer

    async def none() -> None:
        return None

    async def timed(links: tuple[Link, ...]) -> float:
        app = web.Application()
        app[LINKS] = LinkTable(links)
        app[GATES] = Gates("m", lambda: 2)
        app[RESTORE] = Restorer(lambda: 30.0, lambda lane: True, lambda cfg, lane: none())
        request = make_mocked_request("POST", PATH, app=app)
        config: Any = SimpleNamespace(id="plain")
        started = time.perf_counter_ns()
        for _ in range(n):  # as router/inference/kinds.py `Local.serve` does it
            if not borrowed.ungated(request, config, Lane.TEXT):
                async with borrowed.serving(request, config, Lane.TEXT):
                    pass
        return (time.perf_counter_ns() - started) / n / 1000

    link = Link("text", "m", "slow", "s1", "fast")
    runs = [asyncio.run(timed(links)) for links in ((), (link,), (), (link,), (), (link,))]
    absent, present = c.med(runs[0::2]), c.med(runs[1::2])
    return {"links_absent_us": round(absent or 0, 2), "links_present_us": round(present or 0, 2)}


def target_rows(d: dict[str, Any]) -> list[tuple[str, str, Any, float, bool, str, int]]:
    """(goal, target text, value, limit, higher is better, unit, digits) for bench/report.py."""
    drain = d.get("drain") or {}
    latency = d.get("latency") or {}
    return [
        (
            "Lending: drain 200 queued, link / none (issue 16)",
            "<= 0.6",
            drain.get("ratio_link_over_no_link"),
            0.6,
            False,
            "",
            2,
        ),
        (
            "Lending: unlinked model added p50, links / none",
            "<= 1.02",
            latency.get("added_ratio_present_over_absent"),
            1.02,
            False,
            "",
            2,
        ),
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    n = 60 if opts.quick else 200
    c.log(f"lending: {n} queued requests on a slow owner, with and without a link")
    with c.workdir("lending") as wd, c.Stack() as stack:
        master, slave = start(stack, wd)
        data = {"drain": drain_arms(opts, master, slave, n), "latency": latency_arms(opts, master)}
    data["serving_cost"] = serving_cost()
    c.save(opts, "lending", data)
    return data


if __name__ == "__main__":
    main()
