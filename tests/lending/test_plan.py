"""Lending's pure decisions (docs/lending.md, "The cost model", "Leases"): cost fits,
pricing and slots, the lease table's expiry and renewal, the context gate, and planning."""

from __future__ import annotations

import json
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.cluster import RuntimeStatus
from router.config import LendingSettings
from router.lending.costs import CostFit, fit_costs, fit_of, job_seconds
from router.lending.decisions import DecisionLog
from router.lending.leases import Lease, LeaseTable, LendBook, renewed
from router.lending.links import Link
from router.lending.planner import apply_row
from router.lending.planning import (
    BYTES_PER_TOKEN,
    HelperView,
    context_fits,
    cut_after,
    hold_for_helper,
    needed_tokens,
    plan_owner,
)
from router.lending.pricing import quote

VALUES = LendingSettings()
seconds = st.floats(0.01, 100, allow_nan=False)


# -- fits -------------------------------------------------------------------------------


@given(st.lists(seconds, max_size=40), st.integers(2, 30))
def test_fit_is_the_median_and_fitted_needs_min_samples(jobs: list[float], least: int) -> None:
    fits = fit_costs([("m", "text", s) for s in jobs], {"m": [3.0, 5.0, 4.0]}, least)
    if not jobs:  # loaded, never served: a load-only fit
        assert fits == (CostFit("m", "text", None, 4.0, 0, False),)
        return
    (fit,) = fits
    assert fit.samples == len(jobs) and fit.fitted == (len(jobs) >= least)
    assert fit.job_s == pytest.approx(statistics.median(jobs), abs=1e-3)
    assert fit.load_s == 4.0


def test_fits_are_per_model_and_lane_and_robust_to_one_outlier() -> None:
    jobs = [("a", "text", 1.0)] * 20 + [("a", "text", 300.0), ("a", "image", 9.0)]
    fits = fit_costs(jobs, {}, 20)
    text = fit_of(fits, "a", "text")
    assert text is not None and text.job_s == 1.0 and text.fitted and text.load_s is None
    image = fit_of(fits, "a", "image")
    assert image is not None and image.samples == 1 and not image.fitted
    assert fit_of(fits, "b", "text") is None


@given(st.floats(0, 1e6), st.one_of(st.none(), st.floats(0, 1e6)))
def test_job_seconds_never_negative(duration: float, wait: float | None) -> None:
    got = job_seconds(duration, wait)
    assert got >= 0 and got <= duration / 1000.0 + 1e-9


# -- pricing ----------------------------------------------------------------------------


def fit(job: float | None, load: float | None = None, fitted: bool = True) -> CostFit:
    return CostFit("x", "text", job, load, 20 if fitted else 3, fitted)


def price(backlog: int, owner: CostFit | None, helper: CostFit | None, **kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = dict(
        helper_loaded=False,
        displaced=None,
        displaces=False,
        restore=False,
        faster_slots=2,
        slower_slots=1,
    )
    args.update(kw)
    return quote(backlog=backlog, owner=owner, helper=helper, **args)  # type: ignore[arg-type]


def test_the_worked_example_of_the_docs() -> None:
    # Owner 2.0 s a job with 6 queued; helper 1.0 s a job, not loaded, loads in 4 s.
    got = price(6, fit(2.0), fit(1.0, 4.0))
    assert got.lend and got.slots == 2 and got.reasons == ()
    assert (got.owner_drain_s, got.helper_first_s) == (12.0, 5.0)
    # Restoring the model it displaces (3 s reload) still pays: 8 s < 12 s.
    got = price(6, fit(2.0), fit(1.0, 4.0), displaced=fit(None, 3.0), displaces=True, restore=True)
    assert got.lend and got.helper_first_s == 8.0
    # With 2 queued the owner drains in 4 s, before the helper's first job (5 s).
    got = price(2, fit(2.0), fit(1.0, 4.0))
    assert not got.lend and got.reasons == ("cost_rejected",)


@given(
    backlog=st.integers(1, 50), owner=seconds, helper=seconds, load=seconds, loaded=st.booleans()
)
def test_priced_pairs_lend_when_the_helper_returns_first(
    backlog: int, owner: float, helper: float, load: float, loaded: bool
) -> None:
    got = price(backlog, fit(owner), fit(helper, load), helper_loaded=loaded)
    first = helper + (0.0 if loaded else load)
    if round(first, 4) < round(backlog * owner, 4):
        assert got.lend and got.slots == (2 if helper <= owner else 1)
    else:
        assert not got.lend and "cost_rejected" in got.reasons


@given(backlog=st.integers(1, 50), owner=st.one_of(st.none(), seconds))
def test_unpriced_pairs_still_lend_with_the_slower_slots(backlog: int, owner: float | None) -> None:
    # No owner fit (a fresh cluster): lends, one at a time, and says why.
    got = price(backlog, None if owner is None else fit(owner, fitted=False), None)
    assert got.lend and got.slots == 1 and "owner_unpriced" in got.reasons


@given(owner=seconds, backlog=st.integers(1, 50))
def test_an_unfitted_helper_is_priced_with_the_owners_fit(owner: float, backlog: int) -> None:
    got = price(backlog, fit(owner), fit(0.001, fitted=False), helper_loaded=True)
    assert "service_unpriced" in got.reasons
    assert got.lend == (round(owner, 4) < round(backlog * owner, 4))
    if got.lend:
        assert got.slots == 1 and got.helper_first_s == pytest.approx(owner, abs=1e-3)


def test_unknown_switch_and_restore_costs_are_named() -> None:
    got = price(6, fit(2.0), fit(1.0, None))
    assert got.lend and got.slots == 1 and got.reasons == ("switch_unpriced",)
    got = price(6, fit(2.0), fit(1.0, 4.0), displaces=True, restore=True)
    assert got.lend and got.slots == 1 and got.reasons == ("restore_unpriced",)
    # A loaded helper switches nothing and displaces nothing.
    got = price(6, fit(2.0), fit(1.0, None), helper_loaded=True, displaces=True, restore=True)
    assert got.reasons == () and got.helper_first_s == 1.0


# -- leases -----------------------------------------------------------------------------


def lease(helper: str = "s1", slots: int = 2, expires: float = 30.0) -> Lease:
    return Lease("text", "m", "slow", helper, "fast", False, False, slots, False, expires, 30000)


@given(slots=st.integers(1, 5), takes=st.integers(0, 8), now=st.floats(0, 60))
def test_take_never_exceeds_the_slots_of_a_live_lease(slots: int, takes: int, now: float) -> None:
    table = LeaseTable()
    assert table.put(lease(slots=slots))
    got = [table.take(("text", "m", "slow"), now) for _ in range(takes)]
    taken = [x for x in got if x is not None]
    assert len(taken) == (0 if now >= 30.0 else min(slots, takes))
    for x in taken:
        table.release(x.key)
    assert table.in_use == {}


def test_expiry_renewal_and_news() -> None:
    table = LeaseTable()
    first = lease()
    assert table.put(first)  # new: news
    assert not table.put(renewed(first, 10.0, 30.0))  # renewed, same terms: no news
    assert table.live(first.owner, 35.0)  # renewed at 10 s: lives to 40 s
    assert table.put(lease(slots=1))  # changed terms: news
    assert table.expire(29.0) == [] and table.expire(30.0) == [lease(slots=1)]
    assert table.live(first.owner, 0.0) == []
    # A slot taken before the lease was cleared is given back without trouble.
    table.put(first)
    taken = table.take(first.owner, 1.0)
    assert taken is not None and table.clear(first.key) == first
    table.release(first.key)
    assert table.in_use == {} and table.take(first.owner, 1.0) is None


def test_take_prefers_free_slots_and_respects_fits() -> None:
    table = LeaseTable()
    table.put(lease("s1", slots=1))
    table.put(lease("s2", slots=2))
    got = table.take(("text", "m", "slow"), 0.0)
    assert got is not None and got.helper_node_id == "s2"
    got = table.take(("text", "m", "slow"), 0.0, fits=lambda x: x.helper_node_id == "s1")
    assert got is not None and got.helper_node_id == "s1"
    assert table.take(("text", "m", "slow"), 0.0, fits=lambda x: x.helper_node_id == "s1") is None


# -- the context gate -------------------------------------------------------------------


@given(
    text=st.text(max_size=200),
    limit=st.one_of(st.none(), st.integers(1, 5000)),
    key=st.sampled_from(["max_tokens", "max_completion_tokens", "n_predict"]),
    reserve=st.integers(0, 1000),
)
def test_needed_tokens_counts_the_prompt_and_the_answer(
    text: str, limit: int | None, key: str, reserve: int
) -> None:
    doc: dict[str, object] = {"messages": [{"role": "user", "content": text}]}
    if limit is not None:
        doc[key] = limit
    body = json.dumps(doc).encode()
    need = needed_tokens(body, reserve)
    assert need >= len(body) / BYTES_PER_TOKEN + (reserve if limit is None else limit)
    assert context_fits(need, need) and not context_fits(need, need - 1)
    assert not context_fits(need, None)


def test_needed_tokens_of_odd_bodies() -> None:
    assert needed_tokens(b"", 256) == 256
    assert needed_tokens(b"not json", 10) == 4 + 10
    assert needed_tokens(b'{"max_tokens": true}', 7) == 10 + 7  # no count: the reserve


# -- planning ---------------------------------------------------------------------------


LINKS = (
    Link("text", "m", "slow", "s1", "fast"),
    Link("text", "m", "slow", "s2", "fast", load_if_unloaded=False),
)


def view(**kw: object) -> HelperView:
    fields: dict[str, object] = dict(
        answered=True,
        available=True,
        own_work=0,
        recently_busy=False,
        loaded=True,
        displaces=False,
        context_length=8192,
        cost=None,
    )
    fields.update(kw)
    return HelperView(**fields)  # type: ignore[arg-type]


def plan(needs: list[int], owner_cost: CostFit | None = None, **views: HelperView):  # type: ignore[no-untyped-def]
    helpers = {("s1", "fast"): views.get("s1", view()), ("s2", "fast"): views.get("s2", view())}
    return plan_owner(
        LINKS,
        needs=needs,
        owner_busy=2,
        owner_cost=owner_cost,
        helpers=helpers,
        values=VALUES,
        now=100.0,
    )


def test_nothing_held_nothing_planned() -> None:
    assert plan([]) == ()


def test_a_fresh_cluster_grants_unpriced_leases() -> None:
    rows = plan([50, 50])
    assert [r.outcome for r in rows] == ["granted", "granted"]
    first = rows[0]
    assert first.reasons == ("owner_unpriced", "service_unpriced")
    assert (
        first.lease is not None and first.lease.helper_slots == VALUES.offload_slower_helper_slots
    )
    assert first.lease.expires == 100.0 + VALUES.scheduling_grant_ttl
    assert first.lease.ttl_ms == int(VALUES.scheduling_grant_ttl * 1000)


@pytest.mark.parametrize(
    ("s1", "reason"),
    [
        (view(answered=False), "helper_not_accepting"),
        (view(available=False), "helper_not_accepting"),
        (view(own_work=1), "helper_not_accepting"),
        (view(claimed=True), "helper_claimed"),
        (view(recently_busy=True), "helper_recently_busy"),
        (view(context_length=40), "context_too_small"),
        (view(context_length=None), "context_too_small"),
    ],
)
def test_skip_reasons(s1: HelperView, reason: str) -> None:
    row = plan([50], s1=s1)[0]
    assert (row.outcome, row.reasons, row.lease) == ("skipped", (reason,), None)


def test_a_load_the_link_forbids_and_restore_terms() -> None:
    rows = plan([50], s1=view(loaded=False, displaces=True), s2=view(loaded=False))
    assert rows[1].reasons == ("load_forbidden",)
    granted = rows[0].lease
    assert granted is not None and granted.load_helper_model
    assert not granted.restore_helper_model  # the link does not ask for a restore
    restoring = (Link("text", "m", "slow", "s1", "fast", restore_after_borrow=True),)
    rows2 = plan_owner(
        restoring,
        needs=[50],
        owner_busy=2,
        owner_cost=None,
        helpers={("s1", "fast"): view(loaded=False, displaces=True)},
        values=VALUES,
        now=0.0,
    )
    assert rows2[0].lease is not None and rows2[0].lease.restore_helper_model
    assert "restore_unpriced" in rows2[0].reasons


@given(
    needs=st.lists(st.integers(1, 20000), min_size=1, max_size=8),
    window=st.integers(1, 20000),
    own=st.integers(0, 2),
    busy=st.booleans(),
)
def test_a_grant_only_for_an_accepting_helper_that_holds_some_request(
    needs: list[int], window: int, own: int, busy: bool
) -> None:
    rows = plan(needs, s1=view(context_length=window, own_work=own, recently_busy=busy))
    granted = rows[0].outcome == "granted"
    assert granted == (own == 0 and not busy and min(needs) <= window)
    assert (rows[0].lease is not None) == granted


# -- probes -----------------------------------------------------------------------------


@given(idle=st.floats(0, 200), since=st.floats(0, 200), loaded=st.booleans())
def test_a_cost_rejected_idle_helper_gets_a_probe_when_due(
    idle: float, since: float, loaded: bool
) -> None:
    slow_helper = CostFit("fast", "text", 50.0, 1.0, 20, True)  # never worth it on price
    owner = CostFit("slow", "text", 1.0, 1.0, 20, True)
    s1 = view(cost=slow_helper, idle_s=idle, since_probe_s=since, loaded=loaded)
    row = plan([50], owner, s1=s1)[0]
    wait = VALUES.offload_probe_idle * (1 if loaded else 12)
    assert "cost_rejected" in row.reasons
    if idle >= wait and since >= wait:
        assert row.outcome == "probe" and row.lease is not None and row.lease.probe
        assert row.lease.helper_slots == VALUES.offload_probe_helper_slots
        assert row.lease.load_helper_model == (not loaded)
    else:
        assert row.outcome == "skipped" and row.lease is None


def test_no_probe_for_a_helper_that_is_not_accepting() -> None:
    s1 = view(own_work=1, idle_s=1e6)
    assert plan([50], s1=s1)[0].outcome == "skipped"


# -- what is recorded, and what an old peer sends -----------------------------------------


def test_rows_are_recorded_on_changes_only() -> None:
    book, log = LendBook(), DecisionLog()
    granted = plan([50])[0]
    for _ in range(3):  # the same plan on every event: one plan row, one lease_updated
        apply_row(book, log, granted, "enqueued")
    seen = [(d.kind, d.outcome) for d in log.newest(10)][::-1]
    assert seen == [("plan", "granted"), ("dispatch", "lease_updated")]
    assert len(book.table.leases) == 1
    skipped = plan([50], s1=view(own_work=1))[0]
    apply_row(book, log, skipped, "completed")
    apply_row(book, log, skipped, "completed")
    newest = list(log.newest(10))
    assert [(d.kind, d.outcome) for d in newest[:2]][::-1] == [
        ("plan", "skipped"),
        ("dispatch", "lease_cleared"),
    ]
    assert len(newest) == 4 and newest[0].reasons == ("helper_not_accepting",)
    assert book.table.leases == {}


def test_an_old_peers_status_parses_without_models_or_costs() -> None:
    old = RuntimeStatus.model_validate({"node_id": "s1", "active_requests": 1})
    assert old.costs == () and old.models == {}
    new = RuntimeStatus.model_validate(
        {
            "node_id": "s1",
            "models": {"fast": {"active": 1, "queued": 2}},
            "costs": [
                {
                    "model_id": "fast",
                    "lane": "text",
                    "job_s": 0.5,
                    "load_s": None,
                    "samples": 3,
                    "fitted": False,
                    "newer_field": 1,
                }
            ],
        }
    )
    assert new.models["fast"].queued == 2 and new.costs[0].job_s == 0.5


# -- hold-for-faster-helper and the cut ---------------------------------------------------


@given(
    owner=st.one_of(st.none(), seconds),
    helper=st.one_of(st.none(), seconds),
    started=st.lists(st.floats(0, 100), max_size=3),
    now=st.floats(0, 200),
)
def test_hold_only_for_a_faster_helper_that_would_finish_first(
    owner: float | None, helper: float | None, started: list[float], now: float
) -> None:
    held = hold_for_helper(owner_job=owner, helper_job=helper, started=started, now=now)
    if owner is None or helper is None or not started or helper >= owner:
        assert not held  # an unknown, a slower helper or nothing out never stops the owner
        return
    done = min(started) + (len(started) + 1) * helper
    assert held == (now <= done and done - now < owner)


def test_hold_example_and_release_on_overrun() -> None:
    # Owner 2.0 s a job, helper 0.5 s; two lent requests out since t=10.
    assert hold_for_helper(owner_job=2.0, helper_job=0.5, started=[10.0, 10.2], now=10.1)
    # Predicted done at 11.5 (10 + 3 x 0.5); at 11.6 the helper overran: released.
    assert not hold_for_helper(owner_job=2.0, helper_job=0.5, started=[10.0, 10.2], now=11.6)


def test_cut_after_is_priced_or_absent() -> None:
    helper, owner = fit(1.0, 4.0), fit(2.0)
    assert cut_after(False, helper, owner) == 3 * 1.0 + 30
    assert cut_after(True, helper, owner) == 3 * (4.0 + 1.0) + 30
    assert cut_after(False, fit(1.0, fitted=False), owner) == 3 * 2.0 + 30  # owner's fit
    assert cut_after(True, fit(1.0, None), owner) is None  # the load is unknown
    assert cut_after(False, None, None) is None
