"""Builds the generated part of bench/RESULTS.md and bench/results.png from bench/out/*.json.

Only the text between the GENERATED markers is replaced; the analysis around it is kept.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench import common as c
from bench import eta, fair_queue, keys, lending, pooled, profile_proxy, real_backend, traces

RESULTS = c.BENCH / "RESULTS.md"
CHART = c.BENCH / "results.png"
START, END = "<!-- GENERATED:START -->", "<!-- GENERATED:END -->"


def load(out: Path) -> dict[str, dict[str, Any]]:
    data = {}
    for path in sorted(out.glob("*.json")):
        data[path.stem] = json.loads(path.read_text())
    return data


def f(v: Any, nd: int = 2, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, (int, float)):
        return f"{v:.{nd}f}{unit}"
    return str(v)


def g(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def verdict(value: Any, target: float, higher_is_better: bool) -> str:
    if value is None:
        return "not measured"
    ok = value >= target if higher_is_better else value <= target
    return "met" if ok else "**missed**"


def targets(d: dict[str, dict[str, Any]]) -> list[str]:
    lat, rps, st, cold, rss, an = (
        d.get(k, {}) for k in ("latency", "rps", "streams", "cold_start", "rss", "analytics")
    )
    s64 = g(st, "scenarios", "64 streams @50 tok/s", "summary") or {}
    s16 = g(st, "scenarios", "16 streams @50 tok/s", "summary") or {}
    rss_idle = g(rss, "points", "idle, after load test", "rss_mib")
    rows = [
        (
            "Router-added p50 latency, 1 connection (instant upstream)",
            "<= 0.5 ms",
            g(lat, "summary", "arms", "router", "added_p50_ms"),
            0.5,
            False,
            " ms",
            3,
        ),
        (
            "Router-added p99 latency, 1 connection (P1)",
            "<= 5 ms",
            g(lat, "summary", "arms", "router", "added_p99_ms"),
            5.0,
            False,
            " ms",
            2,
        ),
        (
            "Router added / nginx added, p50 (P1)",
            "<= 3x",
            g(lat, "summary", "router_added_over_nginx_added"),
            3.0,
            False,
            "x",
            1,
        ),
        (
            "Streamed tokens/s, router / direct, 64 streams",
            ">= 0.98",
            g(s64, "router", "tok_s_ratio"),
            0.98,
            True,
            "",
            3,
        ),
        (
            "TTFT router / direct, 64 streams (200 ms backend TTFT)",
            "<= 1.05",
            g(s64, "router", "ttft_ratio"),
            1.05,
            False,
            "",
            3,
        ),
        (
            "TTFT router / direct, 16 streams",
            "<= 1.05",
            g(s16, "router", "ttft_ratio"),
            1.05,
            False,
            "",
            3,
        ),
        (
            "RPS router / LiteLLM, 32 connections",
            ">= 2x",
            g(rps, "summary", "router_over_litellm"),
            2.0,
            True,
            "x",
            1,
        ),
        (
            "RPS router / nginx, 32 connections",
            ">= 0.5x",
            g(rps, "summary", "router_over_nginx"),
            0.5,
            True,
            "x",
            3,
        ),
        (
            "Cold-start overhead over direct start (first token)",
            "<= 20 ms",
            g(cold, "summary", "cold_overhead_ms"),
            20.0,
            False,
            " ms",
            1,
        ),
        ("Router RSS idle (after load test)", "<= 80 MiB", rss_idle, 80.0, False, " MiB", 1),
        (
            "RPS analytics on / off (P6)",
            ">= 0.97",
            g(an, "summary", "rps_ratio_on_over_off"),
            0.97,
            True,
            "",
            3,
        ),
        *real_backend.target_rows(d.get("real_backend", {})),
        *lending.target_rows(d.get("lending", {})),
        *eta.target_rows(d.get("eta", {})),
        *fair_queue.target_rows(d.get("fair_queue", {})),
        *keys.target_rows(d.get("keys", {})),
        *pooled.target_rows(d.get("pooled", {})),
    ]
    out = ["| Goal | Target | Reached | Verdict |", "|---|---|---|---|"]
    for name, tgt, val, lim, hib, unit, nd in rows:
        v = verdict(val, lim, hib)
        if "analytics" in name and not g(an, "summary", "events_stored"):
            v = "not measurable: nothing is recorded to disk yet (store not wired)"
        out.append(f"| {name} | {tgt} | {f(val, nd, unit)} | {v} |")
    return out


def section(d: dict[str, dict[str, Any]], command: str, elapsed: str) -> str:
    L: list[str] = []
    L.append(
        f"Generated {time.strftime('%Y-%m-%d %H:%M')} by `{command}`"
        + (f" in {elapsed} s" if elapsed else "")
        + ". Reproduce: `make bench` "
        "(or `.venv/bin/python -m bench`; `--quick` for a short run; one script: "
        "`.venv/bin/python -m bench.latency`)."
    )
    any_ = next(iter(d.values()), {})
    L.append(
        f"Repetitions {any_.get('reps')}, {any_.get('block_s')} s per block; medians of "
        "per-repetition differences/ratios. Absolute numbers are from a shared 2-core box "
        "and only indicative."
    )
    L += ["", "### Targets", ""] + targets(d)
    for name, data in d.items():
        if "crashed" in data:
            L += ["", f"**{name} crashed**: `{data['crashed'][-300:]}`"]
    lat = d.get("latency")
    if lat and "summary" in lat:
        L += [
            "",
            f"### Latency, 1 connection ({lat['client']}, upstream {lat['upstream']})",
            "",
            "| Arm | p50 ms | p99 ms | added p50 ms | added p99 ms | proxy CPU % |",
            "|---|---|---|---|---|---|",
        ]
        for arm, s in lat["summary"]["arms"].items():
            L.append(
                f"| {arm} | {f(s['p50_ms'], 3)} | {f(s['p99_ms'], 2)} | "
                f"{f(s['added_p50_ms'], 3)} | {f(s['added_p99_ms'], 2)} | "
                f"{f(s['cpu_pct'], 0)} |"
            )
        h = lat.get("router_overhead_header", {})
        L.append(
            f"\nRouter's own `X-Router-Overhead-Ms` over {h.get('n')} requests: p50 "
            f"{f(h.get('p50_ms'), 3)} ms, p99 {f(h.get('p99_ms'), 3)} ms."
        )
        for arm, why in lat.get("skipped", {}).items():
            L.append(f"\n{arm}: {why}")
    rps = d.get("rps")
    if rps and "summary" in rps:
        L += [
            "",
            f"### Requests per second, {rps['connections']} connections ({rps['client']}, "
            f"upstream {rps['upstream']})",
            "",
            "| Arm | RPS | ratio to direct | p99 ms | proxy CPU % | upstream CPU % | errors |",
            "|---|---|---|---|---|---|---|",
        ]
        for arm, s in rps["summary"]["arms"].items():
            L.append(
                f"| {arm} | {f(s['rps'], 0)} | {f(s['ratio_to_direct'], 3)} | "
                f"{f(s['p99_ms'], 1)} | {f(s['cpu_pct'], 0)} | {f(s['backend_cpu_pct'], 0)}"
                f" | {s['errors']} |"
            )
        L.append(
            f"\nrouter / nginx = {f(rps['summary'].get('router_over_nginx'), 3)}, "
            f"router / LiteLLM = {f(rps['summary'].get('router_over_litellm'), 2)}."
        )
    an = d.get("analytics")
    if an and "summary" in an:
        s = an["summary"]
        L += [
            "",
            "### Analytics on / off (32 connections)",
            "",
            f"{an.get('routers_per_arm', 1)} router processes per arm, every repetition "
            f"visiting each. RPS on {f(s['rps'].get('analytics on'), 0)}, off "
            f"{f(s['rps'].get('analytics off'), 0)}; ratio on/off "
            f"{f(s['rps_ratio_on_over_off'], 3)}; p99 added {f(s['p99_added_ms'], 2)} ms. "
            f"Same-arm spread (fastest / slowest router of one arm, the noise floor): "
            f"`{json.dumps(s.get('same_arm_spread'))}`. Stored {s.get('events_stored')} events "
            f"for {s['requests_sent_with_analytics_on']} requests sent with analytics on.",
        ]
        if not s.get("events_stored"):
            L.append(
                "**Nothing was recorded to disk**: this ratio is noise between identical "
                "routers, not the cost of analytics."
            )
    st = d.get("streams")
    if st and "scenarios" in st:
        L += [
            "",
            f"### Streams ({st['client']}, {st['block_s_streams']} s blocks)",
            "",
            "| Scenario | Arm | tokens/s | ratio | TTFT p50 ms | TTFT ratio | event delay "
            "p50 / p99 ms | added p50 / p99 ms | coalesced | proxy CPU % |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, sc in st["scenarios"].items():
            for arm, s in sc["summary"].items():
                L.append(
                    f"| {label} | {arm} | {f(s['tok_s'], 0)} | {f(s['tok_s_ratio'], 3)} | "
                    f"{f(s['ttft_p50_ms'], 1)} | {f(s['ttft_ratio'], 3)} | "
                    f"{f(s['delay_p50_ms'], 2)} / {f(s['delay_p99_ms'], 2)} | "
                    f"{f(s['delay_added_p50_ms'], 2)} / {f(s['delay_added_p99_ms'], 2)} | "
                    f"{s['coalesced']} | {f(s['cpu_pct'], 0)} |"
                )
    cold = d.get("cold_start")
    if cold and "summary" in cold:
        s = cold["summary"]
        L += [
            "",
            f"### Cold start and swap (real llama-server, demo models, "
            f"{cold.get('reps_used')} repetitions)",
            "",
            "| Arm | request to first token, median ms |",
            "|---|---|",
        ]
        for arm, v in s.items():
            if isinstance(v, dict):
                L.append(f"| {arm} | {f(v['first_ms'], 1)} |")
        L.append(
            f"\nRouter cold overhead {f(s.get('cold_overhead_ms'), 1)} ms, swap overhead "
            f"{f(s.get('swap_overhead_ms'), 1)} ms; llama-server router mode: cold "
            f"{f(s.get('llama_router_cold_overhead_ms'), 1)} ms, swap "
            f"{f(s.get('llama_router_swap_overhead_ms'), 1)} ms (each vs the direct arm; "
            "median of per-repetition differences)."
        )
        argv = g(cold, "notes", "router_argv_a")
        if argv:
            L.append(
                f"Direct arm argv (read from the router's backend process): "
                f"`{' '.join(Path(a).name if i == 0 else a for i, a in enumerate(argv))}`."
            )
    rb = d.get("real_backend")
    if rb:
        L += real_backend.report_lines(rb, d.get("latency"))
    if d.get("traces"):
        L += traces.report_lines(d["traces"])
    if d.get("profile_proxy"):
        L += profile_proxy.report_lines(d["profile_proxy"])
    rss = d.get("rss")
    if rss and "points" in rss:
        L += [
            "",
            "### Router memory (router process only)",
            "",
            "| Point | RSS MiB | USS MiB |",
            "|---|---|---|",
        ]
        for k, v in rss["points"].items():
            L.append(f"| {k} | {f(v['rss_mib'], 1)} | {f(v['uss_mib'], 1)} |")
    L += ["", "![results](results.png)"]
    return "\n".join(L)


def chart(d: dict[str, dict[str, Any]]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        c.skip("chart", "matplotlib")
        return False
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    lat = g(d.get("latency", {}), "summary", "arms") or {}
    arms = [a for a in lat if a != "direct"]
    ax = axes[0][0]
    ax.bar(arms, [lat[a]["added_p50_ms"] or 0 for a in arms], color="tab:blue")
    ax.axhline(0.5, color="red", linestyle="--", label="target 0.5 ms (router)")
    ax.set_yscale("log")
    ax.set_title("Added p50 latency vs direct, 1 connection (ms, log)")
    ax.legend()
    rps = g(d.get("rps", {}), "summary", "arms") or {}
    ax = axes[0][1]
    ax.bar(list(rps), [rps[a]["ratio_to_direct"] or 0 for a in rps], color="tab:green")
    ax.set_yscale("log")
    ax.set_title("RPS / direct, 32 connections (log)")
    st = g(d.get("streams", {}), "scenarios") or {}
    ax = axes[1][0]
    labels = list(st)
    sarms = [a for a in (next(iter(st.values()))["summary"] if st else {}) if a != "direct"]
    width = 0.8 / max(1, len(sarms))
    for i, arm in enumerate(sarms):
        vals = [st[lb]["summary"].get(arm, {}).get("tok_s_ratio") or 0 for lb in labels]
        ax.bar([j + i * width for j in range(len(labels))], vals, width, label=arm)
    ax.set_xticks([j + width * (len(sarms) - 1) / 2 for j in range(len(labels))])
    ax.set_xticklabels([lb.replace(" @", "\n@") for lb in labels], fontsize=8)
    ax.axhline(0.98, color="red", linestyle="--")
    ax.set_ylim(0, 1.1)
    ax.set_title("Streamed tokens/s / direct (target 0.98 at 64)")
    if sarms:
        ax.legend(fontsize=8)
    cold = g(d.get("cold_start", {}), "summary") or {}
    ax = axes[1][1]
    carms = [a for a, v in cold.items() if isinstance(v, dict)]
    ax.bar(carms, [cold[a]["first_ms"] or 0 for a in carms], color="tab:orange")
    ax.set_title("Request to first token, real llama-server (ms)")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.suptitle("tensor-router bench (ratios from one interleaved run; shared 2-core box)")
    fig.tight_layout()
    fig.savefig(CHART, dpi=90)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=c.OUT)
    ap.add_argument("--command", default="make bench")
    ap.add_argument("--elapsed", default="")
    ns = ap.parse_args(argv)
    d = load(ns.out)
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\n"
    body = f"{START}\n{section(d, ns.command, ns.elapsed)}\n{END}"
    if START in text and END in text:
        text = text[: text.index(START)] + body + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + body + "\n"
    RESULTS.write_text(text)
    chart(d)
    c.log(f"wrote {RESULTS.relative_to(c.ROOT)} and {CHART.name}")


if __name__ == "__main__":
    main()
