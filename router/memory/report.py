"""llama-server's own memory report, read from its log (pure: lines in, figures out).

Seen here (llama-server 0.6.0-dev, verbosity 4 = `-lv 4`; the default verbosity 3 prints none
of these lines):

    common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |
    common_memory_breakdown_print: |   - Host               |                    4 =     0 +       1 +       3                |
    common_params_fit_impl: projected to use 4 MiB of host memory vs. 24105 MiB of total host memory
    llama_kv_cache: size =    1.00 MiB (  2048 cells,   2 layers,  4/1 seqs), K (f16):    0.50 MiB, V (f16):    0.50 MiB

A GPU row has the shape `| - CUDA0 (name) | total = free + (self = model + context + compute)
+ unaccounted |` (llama.cpp's source; not seen here: this machine has no GPU). The table is
printed when `--fit` sizes the load and again at exit; the last one read wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from router.memory.devices import HOST, gpu_id

MIB = 1 << 20

_TABLE_HEAD = re.compile(r"memory breakdown \[MiB\]")
_ROW = re.compile(r"\|\s+-\s+(?P<label>[^|]+?)\s*\|(?P<figures>[^|]*)\|")
_INT = re.compile(r"\d+")
_GPU_LABEL = re.compile(r"^(?:CUDA|ROCm|HIP|Vulkan|SYCL|MUSA)(?P<index>\d+)\b")
_KV = re.compile(
    r"llama_kv_cache: size =\s*(?P<mib>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers"
)
_PROJECTED = re.compile(r"projected to use (?P<mib>\d+) MiB of (?P<where>host|device) memory")


@dataclass(frozen=True)
class DeviceUse:
    """One row of the breakdown, in bytes."""

    self_bytes: int
    model: int
    context: int
    compute: int


@dataclass
class MemoryReport:
    """What one llama-server said about its own memory (all bytes)."""

    devices: dict[str, DeviceUse] = field(default_factory=dict)  # the last table's rows
    kv_bytes: int | None = None  # summed over `llama_kv_cache: size` lines (SWA has two)
    kv_cells: int | None = None
    projected_host: int | None = None
    projected_device: int | None = None

    @property
    def found(self) -> bool:
        return bool(self.devices) or self.kv_bytes is not None

    def per_device(self) -> dict[str, int]:
        """`self` per device: the bytes the backend holds beyond its fixed process overhead."""
        return {device: use.self_bytes for device, use in self.devices.items()}


def parse_report(lines: Iterable[str]) -> MemoryReport:
    report = MemoryReport()
    in_table = False
    table: dict[str, DeviceUse] = {}
    kv_seen: list[tuple[int, int]] = []
    for line in lines:
        if _TABLE_HEAD.search(line):
            in_table, table = True, {}
            continue
        row = _ROW.search(line) if in_table else None
        if row is not None:
            _add_row(table, row.group("label"), [int(n) for n in _INT.findall(row["figures"])])
            report.devices = dict(table)
            continue
        in_table = False
        _read_other(line, report, kv_seen)
    if kv_seen:
        # A sliding-window model prints one line per cache (full and SWA); a restart of the
        # context (a second load in one log) repeats them: keep the last group.
        report.kv_bytes = sum(b for b, _ in kv_seen[-_kv_group(kv_seen) :])
        report.kv_cells = kv_seen[-1][1]
    return report


def _kv_group(seen: list[tuple[int, int]]) -> int:
    return 2 if len(seen) >= 2 and seen[-1][1] != seen[-2][1] else 1


def _read_other(line: str, report: MemoryReport, kv_seen: list[tuple[int, int]]) -> None:
    kv = _KV.search(line)
    if kv is not None:
        kv_seen.append((round(float(kv["mib"]) * MIB), int(kv["cells"])))
        return
    projected = _PROJECTED.search(line)
    if projected is not None:
        figure = int(projected["mib"]) * MIB
        if projected["where"] == "host":
            report.projected_host = figure
        else:
            report.projected_device = figure


def _add_row(table: dict[str, DeviceUse], label: str, figures: list[int]) -> None:
    gpu = _GPU_LABEL.match(label)
    if gpu is not None and len(figures) >= 7:
        # total = free + (self = model + context + compute) + unaccounted
        use = DeviceUse(*(f * MIB for f in figures[2:6]))
        table[gpu_id(int(gpu["index"]))] = use
    elif len(figures) >= 4:
        # Host rows (Host, CPU_REPACK, ...) all live in RAM: summed into one host figure.
        self_b, model, context, compute = (f * MIB for f in figures[-4:])
        old = table.get(HOST, DeviceUse(0, 0, 0, 0))
        table[HOST] = DeviceUse(
            old.self_bytes + self_b, old.model + model, old.context + context, old.compute + compute
        )


__all__ = ["DeviceUse", "MemoryReport", "parse_report"]
