"""Planning one owner's leases (docs/lending.md, "Leases"), probes of idle helpers, and the
text lane's context gate.
Pure: the master's planner (router/lending/planner.py) gathers what it saw of each helper
and records the rows these functions return.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from router.config import LendingSettings
from router.lending.costs import CostFit
from router.lending.leases import Lease
from router.lending.links import Link
from router.lending.pricing import quote

# Conservative: English text runs near 4 bytes a token and the JSON around a prompt adds
# bytes that are no tokens at all, so 2 over-counts ordinary prompts about twofold; text in
# three-byte UTF-8 scripts (CJK) runs near 1 token a character, which 2 still covers.
BYTES_PER_TOKEN = 2.0
_ANSWER_KEYS = ("max_tokens", "max_completion_tokens", "n_predict", "max_length")


def needed_tokens(body: bytes, reserve: int) -> int:
    """The context a text request needs: its estimated prompt plus the answer it asked for
    (`reserve` when it names no limit, or names one that is no positive whole number)."""
    prompt = math.ceil(len(body) / BYTES_PER_TOKEN)
    answer = reserve
    try:
        doc = json.loads(body) if body else None
    except (UnicodeDecodeError, ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict):
        for key in _ANSWER_KEYS:
            value = doc.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                answer = value
                break
    return prompt + answer


def context_fits(need: int, window: int | None) -> bool:
    """The helper's window holds the request (an unknown window holds nothing)."""
    return window is not None and need <= window


@dataclass(frozen=True, slots=True)
class HelperView:
    """One link's helper as the master saw it just now."""

    answered: bool
    available: bool
    own_work: int
    recently_busy: bool
    loaded: bool
    displaces: bool  # a load would push another loaded model of the lane out
    context_length: int | None
    cost: CostFit | None
    displaced: CostFit | None = None
    claimed: bool = False  # another owner holds a live lease on this helper node's lane
    idle_s: float = 0.0  # since the helper's own work was last seen
    since_probe_s: float = float("inf")  # since this link's last probe was lent


@dataclass(frozen=True, slots=True)
class PlanRow:
    link: Link
    outcome: str  # granted | skipped
    reasons: tuple[str, ...]
    lease: Lease | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def _refusal(link: Link, view: HelperView | None, needs: Sequence[int]) -> str | None:
    if view is None or not view.answered or not view.available or view.own_work > 0:
        return "helper_not_accepting"
    if view.claimed:
        return "helper_claimed"
    if view.recently_busy:
        return "helper_recently_busy"
    if not view.loaded and not link.load_if_unloaded:
        return "load_forbidden"
    if link.lane == "text" and not any(context_fits(n, view.context_length) for n in needs):
        return "context_too_small"
    return None


def plan_owner(
    links: Sequence[Link],
    *,
    needs: Sequence[int],
    owner_busy: int,
    owner_cost: CostFit | None,
    helpers: Mapping[tuple[str, str], HelperView],
    values: LendingSettings,
    now: float,
) -> tuple[PlanRow, ...]:
    """One row per link of an owner holding `needs` (one entry per held request): a lease
    granted over it, or the reason it is skipped. Nothing held: nothing to plan."""
    if not needs:
        return ()
    rows = []
    ttl = values.scheduling_grant_ttl
    for link in links:
        view = helpers.get(link.helper)
        refused = _refusal(link, view, needs)
        if refused is not None or view is None:
            rows.append(PlanRow(link, "skipped", (refused or "helper_not_accepting",)))
            continue
        price = quote(
            backlog=len(needs) + owner_busy,
            owner=owner_cost,
            helper=view.cost,
            helper_loaded=view.loaded,
            displaced=view.displaced,
            displaces=view.displaces,
            restore=link.restore_after_borrow,
            faster_slots=values.offload_faster_helper_slots,
            slower_slots=values.offload_slower_helper_slots,
        )
        if not price.lend:
            probe = _probe(link, view, values, now)
            outcome = "skipped" if probe is None else "probe"
            rows.append(PlanRow(link, outcome, price.reasons, probe, price.detail()))
            continue
        lease = _granted(link, view, price.slots, ttl, now)
        rows.append(PlanRow(link, "granted", price.reasons, lease, price.detail()))
    return tuple(rows)


def _granted(link: Link, view: HelperView, slots: int, ttl: float, now: float) -> Lease:
    """The lease a priced link gets: `slots` at once for `ttl`; the helper loads the owner's
    model when it has not, and goes back to its own after when the link asks and it displaced
    one."""
    return Lease(
        link.lane,
        *link.owner,
        *link.helper,
        load_helper_model=not view.loaded,
        restore_helper_model=link.restore_after_borrow and view.displaces and not view.loaded,
        helper_slots=slots,
        probe=False,
        expires=now + ttl,
        ttl_ms=int(ttl * 1000),
    )


def probe_due(view: HelperView, values: LendingSettings) -> bool:
    """An accepting helper idle from its own work for `offload_probe_idle` (twelve times that
    when it must load), and not probed over this link for as long, gets one probe."""
    wait = values.offload_probe_idle * (1 if view.loaded else 12)
    return view.idle_s >= wait and view.since_probe_s >= wait


def _probe(link: Link, view: HelperView, values: LendingSettings, now: float) -> Lease | None:
    if not probe_due(view, values):
        return None
    ttl = values.scheduling_grant_ttl
    return Lease(
        link.lane,
        *link.owner,
        *link.helper,
        load_helper_model=not view.loaded,
        restore_helper_model=link.restore_after_borrow and view.displaces and not view.loaded,
        helper_slots=values.offload_probe_helper_slots,
        probe=True,
        expires=now + ttl,
        ttl_ms=int(ttl * 1000),
    )


def hold_for_helper(
    *, owner_job: float | None, helper_job: float | None, started: Sequence[float], now: float
) -> bool:
    """Leave the owner's free backend slot empty for this request (`offload_hold_for_faster_
    helper`) while every slot of a faster helper's lease is busy: the helper, serving its `n`
    lent requests one after another since the oldest started, would finish this one at
    `oldest + (n + 1) x helper job`, sooner than the owner's one job. Released when the helper
    overruns that prediction; never without both fits (an unknown never stops the owner)."""
    if owner_job is None or helper_job is None or not started or helper_job >= owner_job:
        return False
    done = helper_done(helper_job, started)
    return now <= done and done - now < owner_job


def helper_done(helper_job: float, started: Sequence[float]) -> float:
    """When a helper serving its lent requests one after another since the oldest of
    `started` would finish one more: a hold for it ends then at the latest."""
    return min(started) + (len(started) + 1) * helper_job


def cut_after(load: bool, helper: CostFit | None, owner: CostFit | None) -> float | None:
    """How long a lent request may go without its helper starting to answer before the owner
    takes it back: 3 x (switch + job) + 30 s; None (no cut) when that is not priced."""
    job = next((f.job_s for f in (helper, owner) if f is not None and f.fitted), None)
    switch = 0.0 if not load else (helper.load_s if helper is not None else None)
    if job is None or switch is None:
        return None
    return 3 * (switch + job) + 30.0
