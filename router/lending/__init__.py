"""Lending: a model's requests served by another node's model when its own backend is busy
(docs/lending.md). One package owns it; the route handlers in router/api call this face, and
nothing here imports router.api (an import-linter contract).

Vocabulary, the same in code, docs and the WebUI:

- **owner**: the model (on a node) whose requests these are; the owner's side runs on the
  master, which holds a request while its owner is busy (`owner.py`).
- **helper**: the model that serves an owner's request in its stead; the helper's side runs
  on the node that serves it, behind an admission gate (`helper.py`, `gate.py`).
- **link**: an owner may lend to a helper (`links.py`; per lane, with its flags).
- **lease**: a link the planner found worth using now, with a number of slots and a time to
  live (`leases.py`; planned by `planner.py` from the pure `planning.py`, `pricing.py`,
  `costs.py`).
- **lent / borrowed**: a request the owner's side sent to a helper is *lent*; the helper
  counts it as *borrowed* work, and hands it back (409 `offload_returned`) when its own work
  comes first.

The rule: the owner never loses a request (a refusal, an unreachable helper or a helper error
puts it back on its owner) and a helper's own clients come first. The wire headers are in
`wire.py`; the settings in `settings.py` (pure) and their lifetime in `context.py`, with the
links, the decision log (`decisions.py`) and the master's push to its slaves (`push.py`);
`status.py` builds the runtime-status body a node reports; `restore.py` puts a helper's lane
back to its model after borrowed work. The contract's route names (`offload`, `routing-links`,
`routing-groups`) stay as they are.
"""

from router.lending.context import links_changed, links_context, load_layers, registered
from router.lending.decisions import Decision, DecisionLog, decision_row
from router.lending.helper import helper_context, serving, ungated
from router.lending.keys import (
    BORROWED,
    BORROWED_OWNER,
    BORROWED_RESTORE,
    DECISIONS,
    GATES,
    LEND,
    LENDING,
    LENDING_PUSH,
    LINKS,
    RESTORE,
)
from router.lending.links import (
    LANES,
    LendingValues,
    Link,
    LinkTable,
    Side,
    ineligible_reason,
    parse_links,
    replace_links,
)
from router.lending.owner import finishing, hold_then_relay, lend, lendable, lendable_remote
from router.lending.planner import planning_context, statuses
from router.lending.push import LINKS_PATH, SETTINGS_PATH, Pusher
from router.lending.settings import LendingLayers, apply_batch, listing, resolve, usable_saved
from router.lending.status import status_body
from router.lending.wire import (
    OFFLOAD_RETURNED,
    WIRE_HEADERS,
    Lent,
    lent_headers,
    owner_header,
    parse_lent,
    parse_owner,
)

__all__ = [
    "BORROWED",
    "BORROWED_OWNER",
    "BORROWED_RESTORE",
    "DECISIONS",
    "GATES",
    "LANES",
    "LEND",
    "LENDING",
    "LENDING_PUSH",
    "LINKS",
    "LINKS_PATH",
    "OFFLOAD_RETURNED",
    "RESTORE",
    "SETTINGS_PATH",
    "WIRE_HEADERS",
    "Decision",
    "DecisionLog",
    "LendingLayers",
    "LendingValues",
    "Lent",
    "Link",
    "LinkTable",
    "Pusher",
    "Side",
    "apply_batch",
    "decision_row",
    "finishing",
    "helper_context",
    "hold_then_relay",
    "ineligible_reason",
    "lend",
    "lendable",
    "lendable_remote",
    "lent_headers",
    "links_changed",
    "links_context",
    "listing",
    "load_layers",
    "owner_header",
    "parse_lent",
    "parse_links",
    "parse_owner",
    "planning_context",
    "registered",
    "replace_links",
    "resolve",
    "serving",
    "status_body",
    "statuses",
    "ungated",
    "usable_saved",
]
