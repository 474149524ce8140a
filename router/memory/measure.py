"""What a runtime holds once loaded: the measured figure (issue 25, docs/residency.md).

After a load reaches READY the figure is, in order of preference:

1. `report`: the backend's own memory report (llama-server at `-lv 4`, router/memory/report.py)
   read from the lines it printed during the load: `self` per device plus the same fixed
   process overhead the estimate adds (estimate.PROCESS_OVERHEAD), so the two compare;
2. `process`: the process tree's resident memory (psutil) on the host, plus NVML's
   per-process use on each GPU (devices.gpu_process_bytes) when the machine has GPUs.

A load that fails for lack of memory records a `raised` figure instead (`raised_figure`).
The arithmetic here is pure; `measure_process` is the one function that reads the system and
runs off the event loop (router/runtime/measuring.py).
"""

from __future__ import annotations

import collections
import math
import re
import signal
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, Literal

import psutil

from router.memory.devices import HOST, gpu_process_bytes
from router.memory.estimate import PROCESS_OVERHEAD
from router.memory.figures import Measured
from router.memory.report import MemoryReport, parse_report

Method = Literal["report", "process", "raised"]
OutputSink = Callable[[str, bytes], None]

# The lines parse_report reads; everything else a load prints is dropped at once.
_REPORT_LINE = re.compile(r"memory breakdown|\|\s+-\s+|llama_kv_cache: size|projected to use")
MAX_REPORT_LINES = 256  # a breakdown is a few rows; a load printing it many times keeps the last
RAISE_FACTOR = 1.5

# What backends print when an allocation fails (llama.cpp/ggml, CUDA, the C++ runtime, torch).
_OOM = re.compile(
    r"out of memory|failed to allocate|unable to allocate|cannot allocate memory"
    r"|bad_alloc|cudaMalloc failed|OutOfMemoryError|not enough memory|alloc.*failed",
    re.IGNORECASE,
)


class ReportLines:
    """The memory-report lines of one load's output, bounded (a tee on the output sink)."""

    def __init__(self, limit: int = MAX_REPORT_LINES) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=limit)

    def add(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace")
        if _REPORT_LINE.search(text):
            self._lines.append(text)

    def tee(self, sink: OutputSink | None) -> OutputSink:
        def on_output(stream: str, line: bytes) -> None:
            self.add(line)
            if sink is not None:
                sink(stream, line)

        return on_output

    @property
    def lines(self) -> list[str]:
        return list(self._lines)


def report_figure(report: MemoryReport, family: str) -> dict[str, int] | None:
    """`self` per device plus the family's fixed overhead on the host; None without a table
    (an older build, `--fit off`, another backend): the process is measured instead."""
    if not report.devices:
        return None
    devices = report.per_device()
    overhead = PROCESS_OVERHEAD.get(family, PROCESS_OVERHEAD["llamacpp"])
    devices[HOST] = devices.get(HOST, 0) + overhead
    return devices


def process_figure(rss: int, gpu: Mapping[str, int]) -> dict[str, int]:
    """The process tree's resident bytes on the host and what NVML saw on each GPU."""
    return {HOST: rss, **{device: amount for device, amount in gpu.items() if amount > 0}}


def raised_figure(estimate: Mapping[str, int], last: Measured | None) -> dict[str, int]:
    """After a load failed for lack of memory: per device, RAISE_FACTOR times the larger of the
    estimate and the last figure kept (measured or already raised), so each further failure
    asks for more again until the load fits or is refused as larger than the budget."""
    previous = dict(last.devices) if last is not None else {}
    devices = set(estimate) | set(previous)
    return {
        device: math.ceil(RAISE_FACTOR * max(estimate.get(device, 0), previous.get(device, 0)))
        for device in sorted(devices)
    }


def out_of_memory(message: str, output: Iterable[str], exit_code: int | None) -> bool:
    """Whether a failed load ran out of memory: an allocation failure in its message or last
    output lines, or killed by SIGKILL before it was ready (the kernel's OOM killer; the
    router's own kill after `load_timeout` fails with a timeout and no exit code)."""
    if exit_code is not None and exit_code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return True
    return any(_OOM.search(text) for text in (message, *output))


def tree_pids(pid: int) -> set[int]:
    """The process and its descendants still alive (a wrapper may run the backend below)."""
    try:
        root = psutil.Process(pid)
        return {pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.Error:
        return set()


def tree_rss(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            continue  # exited between the listing and the read
    return total


def measure_process(
    pid: int,
    lines: Iterable[str],
    family: str,
    nvml: ModuleType | Any | None,
    load_seconds: float | None,
) -> tuple[Measured, Method] | None:
    """The figure for a runtime whose process is `pid` (blocking: psutil, NVML). None when the
    process is gone and printed no report."""
    from_report = report_figure(parse_report(lines), family)
    if from_report is not None:
        return Measured(from_report, load_seconds), "report"
    pids = tree_pids(pid)
    if not pids:
        return None
    gpu = gpu_process_bytes(nvml, pids) if nvml is not None else {}
    return Measured(process_figure(tree_rss(pids), gpu), load_seconds), "process"


__all__ = [
    "MAX_REPORT_LINES",
    "RAISE_FACTOR",
    "Method",
    "ReportLines",
    "measure_process",
    "out_of_memory",
    "process_figure",
    "raised_figure",
    "report_figure",
    "tree_pids",
    "tree_rss",
]
