"""Benchmarks of one model on this node: what a run is (model.py, pure), the measured
requests (probes.py) and the runner that serialises runs and stores them (runner.py).

The HTTP face is router/api/site/benchmarks.py; the decisions are in docs/decisions.md.
"""

from __future__ import annotations

from router.benchmarks.model import (
    ALL,
    RUN_SECTION,
    SECTIONS,
    BenchmarkBusy,
    BenchmarkError,
    RunRequest,
    Summary,
    expand_sections,
    listing,
    parse_run_request,
)
from router.benchmarks.runner import Benchmarks, benchmarks_service

__all__ = [
    "ALL",
    "RUN_SECTION",
    "SECTIONS",
    "BenchmarkBusy",
    "BenchmarkError",
    "Benchmarks",
    "RunRequest",
    "Summary",
    "benchmarks_service",
    "expand_sections",
    "listing",
    "parse_run_request",
]
