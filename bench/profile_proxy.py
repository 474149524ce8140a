"""Issue 36: what the router adds in front of a backend, split into aiohttp's own cost and the
router's (`python -m bench.profile_proxy [--quick] [--reps N] [--block S] [--upstream=llama]
[--baseline=REV]`).

The backend: by default the instant one (bench/upstream.py `--bench-mode raw`, a bare asyncio
protocol with a fixed answer), so the router's own work is what is measured and profiled;
`--upstream=llama` puts the real llama-server there instead (tiny demo model, max_tokens 1;
its OpenMP workers spin on the same two cores, so it measures the added latency the issue
names, with more noise). Arms, all in front of the one backend the router launched
(`POST /v1/completions`), one http.client connection, interleaved blocks whose order rotates
each repetition:

- direct: llama-server's own port;
- bare aiohttp: bench/bare_proxy.py, aiohttp's server and pooled client with nothing else
  (uvloop, the body read whole and sent on, the answer sent back in one write): the floor any
  aiohttp proxy pays, the extra loopback hop included;
- router: tensor-router (trusted_lan, analytics on), running under bench/profiled_router.py;
- with `--baseline REV`: the router of git revision REV (its router/ and backends/ exported
  beside the run, started the same way in front of a llama-server of its own), so a change's
  effect is measured in the same interleaved run as a difference, not across runs.

Per repetition: each arm's p50 minus direct's, and each proxy's CPU per request (its process,
not llama-server's); the medians over repetitions are reported. Then one more router block
runs with cProfile switched on (SIGUSR1/SIGUSR2): each function's own time is put in the
router's code (router/ and backends/), aiohttp (with multidict, yarl, propcache), or the event loop (asyncio,
uvloop); time in the standard library and builtins goes to whoever called it. Profiling slows
everything, so only the shares are used, applied to the unprofiled router CPU per request.
"""

from __future__ import annotations

import io
import json
import os
import pstats
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from bench import common as c
from bench.clients import run_block
from bench.real_backend import ONE, PATH, start_router

OWN_FLAGS = ("--baseline=", "--upstream=")
GROUPS = {
    "aiohttp": ("/aiohttp/", "/multidict/", "/yarl/", "/propcache/", "/aiohappyeyeballs/"),
    "event loop": ("/asyncio/", "/uvloop/", "selectors.py"),
}
# Ours: the router and the backends package (its process supervisor reads the backend's log).
OURS = (str(c.ROOT / "router") + os.sep, str(c.ROOT / "backends") + os.sep)
Key = tuple[str, int, str]


def group_of(filename: str) -> str | None:
    """Whose code a profiled function is; None for the standard library and builtins."""
    if filename.startswith(OURS):
        return "router"
    for group, marks in GROUPS.items():
        if any(mark in filename for mark in marks):
            return group
    return None


def _owners(stats: dict[Key, Any], key: Key, seen: frozenset[Key]) -> dict[str, float]:
    """Shares of a standard-library function's time by the group of its nearest caller that
    has one (weighted by the time spent under each caller); the event loop when none does."""
    group = group_of(key[0])
    if group is not None:
        return {group: 1.0}
    callers = {k: v for k, v in stats[key][4].items() if k not in seen and k in stats}
    total = sum(v[2] for v in callers.values())
    if not callers or total <= 0:
        return {"event loop": 1.0}
    shares: dict[str, float] = {}
    for caller, figures in callers.items():
        for g, share in _owners(stats, caller, seen | {key}).items():
            shares[g] = shares.get(g, 0.0) + share * figures[2] / total
    return shares


def split(profile: Path, requests: int) -> dict[str, Any]:
    """Own time per request by group, and the router's costliest functions."""
    stats: dict[Key, Any] = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    groups: dict[str, float] = {"router": 0.0, "aiohttp": 0.0, "event loop": 0.0}
    own: dict[str, float] = {}
    for key, (_cc, _nc, tt, _ct, _callers) in stats.items():
        for g, share in _owners(stats, key, frozenset()).items():
            groups[g] += tt * share
            if g == "router":
                name = f"{key[0].removeprefix(str(c.ROOT) + os.sep)}:{key[1]}({key[2]})"
                own[name] = own.get(name, 0.0) + tt * share
    total = sum(groups.values()) or 1.0
    top = sorted(own.items(), key=lambda kv: -kv[1])[:15]
    return {
        "profiled_us_per_request": {g: v / requests * 1e6 for g, v in groups.items()},
        "shares": {g: v / total for g, v in groups.items()},
        "router_top_us": [(name, v / requests * 1e6) for name, v in top],
    }


def profiled_block(router: c.Router, seconds: float, out: Path) -> int:
    """One router block with the profiler on; the requests it timed."""
    assert router.proc is not None
    os.kill(router.proc.pid, signal.SIGUSR1)
    res = run_block("http.client", router.url, PATH, json.dumps(ONE).encode(), seconds)
    os.kill(router.proc.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # the stats are written by the router's signal handler
    return int(res["requests"]) + 1  # run_block's warm-up request is profiled too


def measure(urls: dict[str, str], procs: dict[str, Any], opts: c.Opts) -> dict[str, list[Any]]:
    body = json.dumps(ONE).encode()

    def run(arm: str, rep: int) -> dict[str, Any]:
        meter = c.CpuMeter(procs[arm]) if arm in procs else None
        res = run_block("http.client", urls[arm], PATH, body, opts.block)
        if meter is not None:
            spent = meter.percent() / 100.0 * (time.monotonic() - meter.t0)
            res["proxy_cpu_us"] = spent / max(1, res["requests"]) * 1e6
        return res

    return c.interleave(list(urls), opts.reps, run)


def summarize(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"arms": {}}
    for arm in results:
        out["arms"][arm] = {
            "p50_ms": c.med([r["p50_ms"] for r in results[arm]]),
            "added_p50_ms": c.per_rep(results, arm, "direct", "p50_ms", c.diff),
            "proxy_cpu_us": c.med([r.get("proxy_cpu_us") for r in results[arm]]),
        }
    out["router_over_bare_ms"] = c.per_rep(results, "router", "bare aiohttp", "p50_ms", c.diff)
    for arm in (a for a in results if a.startswith("router @")):
        out["router_over_baseline_ms"] = c.per_rep(results, "router", arm, "p50_ms", c.diff)
        out["router_over_baseline_cpu_us"] = c.per_rep(
            results, "router", arm, "proxy_cpu_us", c.diff
        )
    return out


def baseline(wd: Path, stack: c.Stack, llama: str, rev: str) -> tuple[str, c.Router]:
    """The router of revision `rev`, from its own exported sources, chat-a loaded."""
    src = wd / "baseline-src"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(c.ROOT), "archive", rev, "router", "backends"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    launcher = ["env", f"PYTHONPATH={src}", c.PY, "-m", "router.cli"]
    router, _ = start_router(wd / "baseline", stack, llama, launcher)
    return f"router @{rev}", router


def _stack(
    wd: Path, stack: c.Stack, llama: str, prof: Path
) -> tuple[c.Router, dict[str, str], c.Proc]:
    """The router (profiled) in front of llama-server, and the bare proxy beside it."""
    prof.unlink(missing_ok=True)
    launcher = [c.PY, str(c.BENCH / "profiled_router.py"), str(prof)]
    router, _ = start_router(wd, stack, llama, launcher)
    direct = f"http://127.0.0.1:{router.backend('chat-a')['port']}"
    port = c.free_port()
    bare = stack.proc(c.Proc([c.PY, str(c.BENCH / "bare_proxy.py"), str(port), direct], "bare", wd))
    bare_url = f"http://127.0.0.1:{port}"
    c.wait_http(bare_url + "/health", bare, 30)
    return router, {"direct": direct, "bare aiohttp": bare_url, "router": router.url}, bare


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = list(argv if argv is not None else sys.argv[1:])
    ours = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith(OWN_FLAGS)}
    rev, upstream = ours.get("--baseline"), ours.get("--upstream", "raw")
    opts = c.Opts.parse([a for a in args if not a.startswith(OWN_FLAGS)], __doc__ or "")
    llama = c.llama_server_path() if upstream == "llama" else "raw"
    if not llama:
        data: dict[str, Any] = {"skipped": c.skip("profile", "llama-server")}
        c.save(opts, "profile_proxy", data)
        return data
    with c.workdir("profile-proxy") as wd, c.Stack() as stack:
        if llama == "raw":
            llama = str(c.write_wrapper(wd / "instant-upstream", "raw"))
        opts.out.mkdir(parents=True, exist_ok=True)
        prof = opts.out / "profile_proxy.prof"  # kept: `python -m pstats` reads it
        router, urls, bare = _stack(wd, stack, llama, prof)
        assert router.proc is not None
        backend = int(router.backend("chat-a")["pid"])
        procs = {
            "router": c.tree(router.proc.pid, exclude={backend}),
            "bare aiohttp": c.tree(bare.pid),
        }
        if rev is not None:
            name, old = baseline(wd, stack, llama, rev)
            assert old.proc is not None
            urls[name] = old.url
            old_backend = int(old.backend("chat-a")["pid"])
            procs[name] = c.tree(old.proc.pid, exclude={old_backend})
        body = json.dumps(ONE).encode()
        for url in urls.values():  # warm-up: caches, first allocations, pooled connections
            run_block("http.client", url, PATH, body, 0.5)
        results = measure(urls, procs, opts)
        requests = profiled_block(router, 3 * opts.block, prof)
        profile = split(prof, requests)
    data = {
        "upstream": upstream,
        "summary": summarize(results),
        "profile": profile,
        "blocks": results,
    }
    c.save(opts, "profile_proxy", data)
    print("\n".join(report_lines(data)))
    return data


def report_lines(d: dict[str, Any]) -> list[str]:
    if "summary" not in d:
        return ["", f"Proxy profile: {d.get('skipped') or d.get('crashed', '')[-300:]}"]
    s, p = d["summary"], d["profile"]
    up = "real llama-server" if d.get("upstream") == "llama" else "instant upstream"
    L = ["", f"### The router's added latency, aiohttp's share and ours ({up})", ""]
    L += ["| Arm | p50 ms | added p50 ms | proxy CPU / request |", "|---|---|---|---|"]
    for arm, a in s["arms"].items():
        cpu = "" if a["proxy_cpu_us"] is None else f"{a['proxy_cpu_us']:.0f} us"
        L.append(f"| {arm} | {a['p50_ms']:.3f} | {_ms(a['added_p50_ms'])} | {cpu} |")
    cpu = s["arms"]["router"]["proxy_cpu_us"] or 0.0
    shares = p["shares"]
    if "router_over_baseline_ms" in s:
        L.append(
            f"\nRouter over the baseline revision: {_ms(s['router_over_baseline_ms'])} ms p50, "
            f"{_ms(s['router_over_baseline_cpu_us'])} us CPU per request (medians of the "
            "per-repetition differences)."
        )
    L.append(
        f"\nRouter over bare aiohttp: {_ms(s['router_over_bare_ms'])} ms p50. Profiled shares of "
        "the router's CPU: "
        + ", ".join(f"{g} {v * 100:.0f} % (~{v * cpu:.0f} us)" for g, v in shares.items())
        + "."
    )
    L.append("\nThe router's own functions (profiled us per request, cProfile-inflated):")
    L += [f"- {name}: {us:.1f}" for name, us in p["router_top_us"]]
    return L


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


if __name__ == "__main__":
    main()
