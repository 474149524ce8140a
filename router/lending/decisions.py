"""The lending decision log (docs/lending.md): why the master lent, held or refused, and what
helpers returned. `Decision` is one row of the `offload_decisions` table; `DecisionLog` keeps
the newest in memory and hands every row to its sink (the store), never blocking a request.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from router.fields import pick

Kind = Literal["plan", "dispatch", "helper"]
MEMORY_ROWS = 512  # the newest rows, for the WebUI before the store has them


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision. `kind` plan: trigger (enqueued, completed, borrowed_completed,
    probe_due, tick) and outcome (granted, probe, skipped); dispatch: outcome lease_updated,
    lease_cleared, lease_refused, lent, returned, held_for_helper, relay_refused; helper:
    outcome native_waited_behind_borrowed, borrowed_returned. `reasons` name why."""

    kind: Kind
    outcome: str
    lane: str
    owner_node_id: str
    owner_model_id: str
    helper_node_id: str = ""
    helper_model_id: str = ""
    trigger: str = ""
    reasons: tuple[str, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        names = ("at", "kind", "trigger", "outcome", "reasons", "lane", "owner_node_id")
        more = ("owner_model_id", "helper_node_id", "helper_model_id", "detail")
        return pick(self, *names, *more) | {"reasons": list(self.reasons)}


def decision_row(decision: Decision, router_version: str) -> tuple[Any, ...]:
    """The `offload_decisions` columns after `id`, in the table's order (router/store/lending.py);
    a detail JSON cannot carry is kept as its text rather than losing the row."""
    return (
        decision.at,
        decision.kind,
        decision.trigger,
        decision.outcome,
        json.dumps(list(decision.reasons)),
        decision.lane,
        decision.owner_node_id,
        decision.owner_model_id,
        decision.helper_node_id,
        decision.helper_model_id,
        router_version,
        json.dumps(decision.detail, default=str),
    )


class DecisionLog:
    """Record decisions without awaiting: the sink queues them for the store's writer."""

    def __init__(self, sink: Callable[[Decision], None] | None = None) -> None:
        self.recent: deque[Decision] = deque(maxlen=MEMORY_ROWS)
        self.sink = sink

    def record(self, decision: Decision) -> None:
        self.recent.append(decision)
        if self.sink is not None:
            self.sink(decision)

    def newest(self, limit: int) -> Iterable[Decision]:
        return list(self.recent)[-limit:][::-1]
