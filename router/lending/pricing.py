"""Pricing one link (docs/lending.md, "The cost model"): is the owner's backlog drained sooner
with this helper's help, and with how many slots. Pure.

The owner alone needs `backlog x owner job` to drain what it holds. The helper returns its
first lent job after `switch + restore + helper job`: `switch` is its load time when its
model is not loaded, `restore` the reload of the model it displaces when the link says to
restore it. Lend when the helper's first job comes back before the owner would have drained.
"""

from __future__ import annotations

from dataclasses import dataclass

from router.lending.costs import CostFit


@dataclass(frozen=True, slots=True)
class Quote:
    lend: bool
    slots: int
    reasons: tuple[str, ...]
    owner_drain_s: float | None = None
    helper_first_s: float | None = None

    def detail(self) -> dict[str, float | None]:
        return {"owner_drain_s": self.owner_drain_s, "helper_first_s": self.helper_first_s}


def _job(fit: CostFit | None) -> float | None:
    return fit.job_s if fit is not None and fit.fitted else None


def quote(
    *,
    backlog: int,
    owner: CostFit | None,
    helper: CostFit | None,
    helper_loaded: bool,
    displaced: CostFit | None,
    displaces: bool,
    restore: bool,
    faster_slots: int,
    slower_slots: int,
) -> Quote:
    """The price of lending `backlog` (held + in the owner's backend) over one link.

    Unpriced pairs (no owner fit, no helper fit, an unknown load or restore) still lend, but
    only `slower_slots` at once and the reasons say why: a fresh cluster has no history, and
    lending one request at a time is what makes the history."""
    owner_job = _job(owner)
    reasons: list[str] = []
    if owner_job is None:
        reasons.append("owner_unpriced")
    helper_job = _job(helper)
    if helper_job is None:
        reasons.append("service_unpriced")
        helper_job = owner_job  # an unfitted helper is priced with the owner's fit
    switch = 0.0 if helper_loaded else (helper.load_s if helper is not None else None)
    if switch is None:
        reasons.append("switch_unpriced")
    reload = 0.0
    if restore and displaces and not helper_loaded:
        reload_s = displaced.load_s if displaced is not None else None
        if reload_s is None:
            reasons.append("restore_unpriced")
        reload = reload_s or 0.0
    if owner_job is None or helper_job is None or switch is None:
        return Quote(True, slower_slots, tuple(reasons))
    drain = round(backlog * owner_job, 4)
    first = round(switch + reload + helper_job, 4)
    if first >= drain:
        return Quote(False, 0, (*reasons, "cost_rejected"), drain, first)
    fitted_both = "service_unpriced" not in reasons and "restore_unpriced" not in reasons
    slots = faster_slots if fitted_both and helper_job <= owner_job else slower_slots
    return Quote(True, slots, tuple(reasons), drain, first)
