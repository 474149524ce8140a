"""Lending: a model's requests served by another node's model when its own backend is busy
(docs/lending.md). One package owns it; the route handlers in router/api call this face, and
nothing here imports router.api (an import-linter contract).

Vocabulary, the same in code, docs and the WebUI:

- **owner**: the model (on a node) whose requests these are; the owner's side runs on the
  master, which holds a request while its owner is busy (`owner.py`, `Owner`).
- **helper**: the model that serves an owner's request in its stead; the helper's side runs
  on the node that serves it, behind an admission gate (`helper.py`, `Helper`; `gate.py`).
- **link**: an owner may lend to a helper (`links.py`; per lane, with its flags).
- **lease**: a link the planner found worth using now, with a number of slots and a time to
  live (`leases.py`; planned by `planner.py` from the pure `planning.py`, `pricing.py`,
  `costs.py`).
- **lent / borrowed**: a request the owner's side sent to a helper is *lent*; the helper
  counts it as *borrowed* work, and hands it back (409 `offload_returned`) when its own work
  comes first.

The rule: the owner never loses a request (a refusal, an unreachable helper or a helper error
puts it back on its owner) and a helper's own clients come first.

One service owns it all: `Lending` (`service.py`, opened by `open_lending`, kept by the app
under `LENDING` in router/appkeys.py; nothing here imports aiohttp's server side) holds the links, the settings
in force (`settings.py`, pure), the decision log (`decisions.py`), the lease book, the gates,
the restorer (`restore.py`: a helper's lane back to its model after borrowed work), the
planner (`Planner`), the owner's and the helper's sides, the master's push to its slaves
(`push.py`) and the runtime-status body a node reports. It is built with the runtime
manager, the cluster service and the store; handlers call it. The wire
headers are in `wire.py`. The contract's route names (`offload`, `routing-links`,
`routing-groups`) stay as they are.
"""

from router.lending.decisions import Decision, DecisionLog, decision_row
from router.lending.helper_call import Answer
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
from router.lending.push import LINKS_PATH, SETTINGS_PATH, Pusher
from router.lending.service import Lending, open_lending
from router.lending.settings import LendingLayers, apply_batch, listing, resolve, usable_saved
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
    "Answer",
    "LANES",
    "LINKS_PATH",
    "OFFLOAD_RETURNED",
    "SETTINGS_PATH",
    "WIRE_HEADERS",
    "Decision",
    "DecisionLog",
    "Lending",
    "LendingLayers",
    "LendingValues",
    "Lent",
    "Link",
    "LinkTable",
    "Pusher",
    "Side",
    "apply_batch",
    "decision_row",
    "ineligible_reason",
    "open_lending",
    "lent_headers",
    "listing",
    "owner_header",
    "parse_lent",
    "parse_links",
    "parse_owner",
    "replace_links",
    "resolve",
    "usable_saved",
]
