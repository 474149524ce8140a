"""`python -m bench [--quick]`: every benchmark in turn, then bench/RESULTS.md and the chart.

Benchmarks report; they never fail a build: a script that crashes is recorded as such and the
next one runs. Results (JSON) go to bench/out/; `python -m bench.report` rebuilds the report.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback

from bench import common as c

SCRIPTS = [
    "rss",
    "latency",
    "rps",
    "analytics",
    "streams",
    "cold_start",
    "real_backend",
    "profile_proxy",
    "cluster",
    "ui_render",
    "lending",
    "swaps",
    "kv_return",
    "conversations",
    "readahead",
    "residency",
    "eta",
    "traces",
    "fair_queue",
    "keys",
    "pooled",
]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = [s for s in SCRIPTS if f"--only={s}" in argv]
    args = [a for a in argv if not a.startswith("--only=")]
    opts = c.Opts.parse(args, __doc__ or "")
    started = time.monotonic()
    for name in only or SCRIPTS:
        c.log(f"=== {name}")
        try:
            importlib.import_module(f"bench.{name}").main(args)
        except Exception:  # a benchmark never fails the run
            c.log(f"{name} crashed:\n{traceback.format_exc()}")
            c.save(opts, name, {"crashed": traceback.format_exc()[-2000:]})
    c.log(f"all benchmarks: {time.monotonic() - started:.0f} s")
    from bench import report

    report.main(
        [
            "--out",
            str(opts.out),
            "--command",
            "make bench" if not opts.quick else "python -m bench --quick",
            "--elapsed",
            f"{time.monotonic() - started:.0f}",
        ]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
