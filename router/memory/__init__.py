"""Memory-aware residency, the pure core (issue 25; docs/residency.md): memory sizes, the
devices (host RAM and NVML GPUs), the estimate before a load, llama-server's own report after
one, the per-device ledger, the load decision shared by the dry run and the real load
(eviction.plan) and the host room the swap hooks may take (host.py).

The one package that reads system memory and judges it (issue 32; docs/residency.md, "Where
memory is judged"): the runtime manager's live ledger (router/runtime/residency.py,
planning.py, many.py), the vLLM sleep, the read-ahead and the site inventory ask it. Its
limits: docs/residency.md, "Limits and verification".
"""

from router.config.sizes import format_size, parse_size, parse_size_or_auto
from router.memory.devices import HOST, Device, budgets, discover
from router.memory.estimate import Estimate, Footprint, LlamaOptions
from router.memory.eviction import MemoryRefusal, Plan, Victim, plan, plan_load, reload_cost
from router.memory.gguf import GgufHeader, read_header
from router.memory.ledger import Ledger, Resident, Usage
from router.memory.report import MemoryReport, parse_report

__all__ = [
    "GgufHeader",
    "HOST",
    "Device",
    "Estimate",
    "Footprint",
    "Ledger",
    "LlamaOptions",
    "MemoryRefusal",
    "MemoryReport",
    "Plan",
    "Resident",
    "Usage",
    "Victim",
    "budgets",
    "discover",
    "format_size",
    "parse_report",
    "parse_size",
    "parse_size_or_auto",
    "plan",
    "read_header",
    "plan_load",
    "reload_cost",
]
