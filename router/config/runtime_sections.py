"""The `runtime` and `memory` sections of router.yaml: how the runtime manager queues, loads,
swaps and stops backends, and the memory budgets it prices loads against (docs/swaps.md,
docs/residency.md). Part of the schema (router/config/schema.py), which assembles `Settings`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from router.config.durations import Duration, PositiveDuration
from router.config.section import Section
from router.config.sizes import Size, SizeOrAuto


class RuntimeSection(Section):
    load_timeout: PositiveDuration = 600.0
    no_progress_timeout: PositiveDuration = 120.0
    idle_unload: Duration = 0.0
    stop_grace: Duration = 10.0
    drain_timeout: Duration = 900.0
    max_queue: int = Field(default=64, ge=0)
    # R19: requests one runtime serves at once; more wait in the lane's queue. 0: no cap.
    max_in_flight: int = Field(default=0, ge=0)
    queue_timeout: PositiveDuration = 600.0
    # R17: queued requests for the loaded model go first, but never wait longer than this.
    max_batch_wait: Duration = 30.0
    # Issue 26: `grouped` serves the loaded model's queued requests before switching (bounded
    # by max_batch_wait and max_bypass); `fifo` serves strictly in arrival order.
    queue_order: Literal["grouped", "fifo"] = "grouped"
    max_bypass: int = Field(default=8, ge=0)
    # Issue 35 (docs/residency.md, "Who goes first"): no batch request's load stops a runtime
    # that an interactive request used less than this long ago; it waits or is served by what
    # is resident. A batch request that has waited `batch_promote_after` competes as
    # interactive (its bound against a steady interactive stream; 0: no classes at all).
    interactive_guard: Duration = 60.0
    batch_promote_after: Duration = 300.0
    # A streamed OpenAI chat request that has waited this long for its runtime starts its
    # answer with SSE comment lines (position, ETA) while it waits; 0: never (docs/swaps.md).
    announce_wait_after: Duration = 2.0
    stream_idle_timeout: PositiveDuration = 300.0
    # R24: how long one request waits for its whole answer (a non-streamed generation arrives
    # only when done, so no idle deadline can tell a slow backend from a hung one).
    response_timeout: PositiveDuration = 1800.0
    # KV persistence (docs/swaps.md): disk cap for saved llama-server slots, and how long a
    # save (before a stop) or a restore (before the first request) may take.
    kv_cache_dir_budget: Size = 4 << 30
    kv_save_timeout: PositiveDuration = 10.0
    kv_restore_timeout: PositiveDuration = 10.0
    # The router's own shutdown saves every idle runtime's conversations at once within this
    # bound; with `drain_timeout` it must stay under the systemd unit's TimeoutStopSec.
    kv_shutdown_timeout: PositiveDuration = 60.0
    # While a lane drains for a swap, read the incoming model's files into the page cache,
    # capped by the host memory budget (docs/swaps.md, "Overlapping the swap"); false: never.
    readahead: bool = True
    # Issue 25 (docs/residency.md): `memory` prices loads against the memory ledger (a load
    # that does not fit stops the cheapest idle runtimes; one larger than a whole budget is
    # refused); `lane` keeps one runtime per lane and never acts on memory.
    residency: Literal["memory", "lane"] = "memory"


class MemorySection(Section):
    """The memory ledger's budgets per device (docs/residency.md); the runtime manager acts on
    them when `runtime.residency` is `memory`. `host_budget` also caps the swap's read-ahead."""

    # `auto`: total RAM minus `reserve`; or a size such as 600MiB.
    host_budget: SizeOrAuto = "auto"
    # `auto`: each GPU's total minus `reserve`; or a size applied to each GPU.
    gpu_budget: SizeOrAuto = "auto"
    reserve: Size = 1 << 30


__all__ = ["MemorySection", "RuntimeSection"]
