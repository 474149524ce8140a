"""Backend set-up on this node: init jobs that build a backend from its recipe
(backends/recipes.py) and swap it in, and vLLM's persisted launch options
(docs/backends-setup.md)."""

from __future__ import annotations

from router.setup.job import JobState, SetupJob, output_page
from router.setup.options import OPTION_ENV, LaunchOptions, check_backend, parse_options
from router.setup.service import BackendSetup

__all__ = [
    "OPTION_ENV",
    "BackendSetup",
    "JobState",
    "LaunchOptions",
    "SetupJob",
    "check_backend",
    "output_page",
    "parse_options",
]
