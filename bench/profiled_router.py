"""`tensor-router` with cProfile switched by signals, for bench/profile_proxy.py.

`python bench/profiled_router.py OUT.prof start --config ...`: the router's own command line
after the output path. SIGUSR1 starts profiling, SIGUSR2 stops it and writes the stats to
OUT.prof, so the profile holds the measured requests only (no start-up, no load). The handlers
run on the main thread, the event loop's, which is the thread cProfile then traces. The clock
is that thread's CPU time: on a shared box, time the router spends preempted by other
processes is not charged to whatever function it was in.
"""

from __future__ import annotations

import cProfile
import signal
import sys
import time
from types import FrameType


def main() -> None:
    out = sys.argv[1]
    profiler = cProfile.Profile(time.thread_time)

    def begin(_sig: int, _frame: FrameType | None) -> None:
        profiler.enable()

    def end(_sig: int, _frame: FrameType | None) -> None:
        profiler.disable()
        profiler.dump_stats(out)

    signal.signal(signal.SIGUSR1, begin)
    signal.signal(signal.SIGUSR2, end)
    sys.argv = ["tensor-router", *sys.argv[2:]]
    from router.cli import main as router_main

    router_main()


if __name__ == "__main__":
    main()
