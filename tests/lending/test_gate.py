"""The admission gate of enrolled models (router/lending/gate.py) and the restore timer
(router/lending/restore.py): the pure ordering rules with hypothesis, then the gate's waiters
on a real event loop (admission order, hand back, timeouts, a caller that goes away)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.lending.gate import Gate, Gates, GateTimeout, Held, Outcome, admissions, handed_back
from router.lending.links import Link
from router.lending.restore import Restorer, remembered

waiters = st.lists(st.booleans(), max_size=30).map(
    lambda kinds: [Held(seq, borrowed) for seq, borrowed in enumerate(kinds)]
)


@given(waiters, st.integers(0, 10), st.integers(0, 10))
def test_admissions_own_first_in_order_never_past_depth(
    waiting: list[Held], admitted: int, depth: int
) -> None:
    chosen = admissions(waiting, admitted, depth)
    room = max(0, max(1, depth) - admitted)
    assert len(chosen) == min(room, len(waiting))
    assert admitted + len(chosen) <= max(admitted, max(1, depth))
    # Own before borrowed; each kind in arrival order.
    assert [h.borrowed for h in chosen] == sorted(h.borrowed for h in chosen)
    for kind in (False, True):
        seqs = [h.seq for h in chosen if h.borrowed is kind]
        assert seqs == sorted(seqs)
    # A borrowed waiter is admitted only when no own waiter is left behind.
    left = [h for h in waiting if h not in chosen]
    if any(h.borrowed for h in chosen):
        assert all(h.borrowed for h in left)
    # Within a kind, nobody is overtaken by a later arrival.
    for h in chosen:
        assert not any(o.borrowed is h.borrowed and o.seq < h.seq for o in left)


@given(waiters)
def test_handed_back_is_every_borrowed_waiter(waiting: list[Held]) -> None:
    back = handed_back(waiting)
    assert set(back) == {h for h in waiting if h.borrowed}


@given(st.sampled_from([None, "a"]), st.sampled_from([None, "a", "b"]), st.sampled_from(["a", "b"]))
def test_remembered_is_the_model_before_the_first_borrowed_run(
    pending: str | None, before: str | None, borrowed: str
) -> None:
    got = remembered(pending, before, before, borrowed)
    if pending is not None:
        assert got == pending  # never an intermediate model
    elif before is None or before == borrowed:
        assert got is None
    else:
        assert got == before


async def test_gate_admits_depth_then_own_before_borrowed() -> None:
    depth = [1]
    gate = Gate("text", "m", lambda: depth[0])
    first = await gate.enter(borrowed=True, bound=5)
    assert first is Outcome.ADMITTED and gate.admitted == 1
    order: list[str] = []

    async def one(name: str, borrowed: bool) -> None:
        assert await gate.enter(borrowed=borrowed, bound=5) is Outcome.ADMITTED
        order.append(name)
        await asyncio.sleep(0)
        gate.leave(borrowed=borrowed)

    tasks = [asyncio.create_task(one("b1", True))]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(one("o1", False)), asyncio.create_task(one("o2", False))]
    await asyncio.sleep(0)
    assert gate.waiting_own == 2 and gate.waiting_borrowed == 1
    gate.leave(borrowed=True)
    await asyncio.gather(*tasks)
    assert order == ["o1", "o2", "b1"] and gate.idle


async def test_depth_is_read_at_every_decision() -> None:
    depth = [1]
    gate = Gate("text", "m", lambda: depth[0])
    await gate.enter(borrowed=False, bound=5)
    second = asyncio.create_task(gate.enter(borrowed=False, bound=5))
    await asyncio.sleep(0.01)
    assert not second.done()
    depth[0] = 2  # hot reload: the next decision (any release or arrival) sees it
    third = asyncio.create_task(gate.enter(borrowed=False, bound=5))
    assert await second is Outcome.ADMITTED  # the new arrival's decision admitted it first
    await asyncio.sleep(0.01)
    assert not third.done() and gate.admitted == 2
    gate.leave(borrowed=False)
    assert await third is Outcome.ADMITTED and gate.admitted == 2


async def test_hand_back_returns_only_waiting_borrowed() -> None:
    gates = Gates("s1", lambda: 1)
    gate = gates.mark("text", "fast")
    assert await gate.enter(borrowed=True, bound=5) is Outcome.ADMITTED
    owners = [("m", "slow"), ("s2", "big"), ("m", "slow")]
    waiting = [asyncio.create_task(gate.enter(borrowed=True, bound=5, owner=o)) for o in owners]
    await asyncio.sleep(0)
    assert gates.lanes["text"].hand_back() == tuple(owners)  # each waiter's owner, in order
    assert [await t for t in waiting] == [Outcome.RETURNED] * 3
    assert gate.admitted == 1 and gate.admitted_borrowed == 1  # the admitted one finishes
    gate.leave(borrowed=True)
    assert gate.idle


async def test_a_waiter_times_out_and_a_cancelled_one_leaves_no_trace() -> None:
    gate = Gate("text", "m", lambda: 1)
    await gate.enter(borrowed=False, bound=5)
    with pytest.raises(GateTimeout):
        await gate.enter(borrowed=False, bound=0.05)
    gone = asyncio.create_task(gate.enter(borrowed=False, bound=5))
    await asyncio.sleep(0)
    assert gate.waiting_own == 1
    gone.cancel()  # the client disconnected while held
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert gate.waiting_own == 0 and gate.admitted == 1
    # Granted in the same instant as the caller gives up: the slot is not leaked.
    late = asyncio.create_task(gate.enter(borrowed=False, bound=5))
    await asyncio.sleep(0)
    gate.leave(borrowed=False)  # grants `late` ...
    late.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await late
    assert gate.idle


def test_enrolment_follows_the_link_table() -> None:
    gates = Gates("s1", lambda: 2)
    links = (Link("text", "m", "slow", "s1", "fast"), Link("text", "s1", "mine", "m", "x"))
    gates.refresh(links)
    assert set(gates.lanes["text"].gates) == {"fast", "mine"}
    gates.mark("image", "pic")
    gates.refresh(())
    assert "text" not in gates.lanes and set(gates.lanes["image"].gates) == {"pic"}


async def test_restore_after_quiet_and_own_request_cancels() -> None:
    loaded: list[tuple[str, str]] = []
    quiet = [True]

    async def load(config: str, lane: str) -> None:
        loaded.append((config, lane))

    restorer: Restorer[str] = Restorer(lambda: 0.05, lambda lane: quiet[0], load)
    restorer.borrowed_arrived("text")
    restorer.borrowed_admitted("text", "native", "native", "fast", wanted=True)
    restorer.borrowed_admitted("text", "other", "other", "fast", wanted=True)  # intermediate
    assert restorer.pending("text") == "native"
    restorer.borrowed_done("text")
    for _ in range(200):
        if loaded:
            break
        await asyncio.sleep(0.01)
    assert loaded == [("native", "text")] and restorer.pending("text") is None

    restorer.borrowed_admitted("text", "native", "native", "fast", wanted=True)
    restorer.borrowed_done("text")
    restorer.own_arrived("text")
    assert restorer.pending("text") is None
    await restorer.close()
    assert loaded == [("native", "text")]

    restorer.borrowed_admitted("text", "native", "native", "fast", wanted=False)
    assert restorer.pending("text") is None  # the owner did not ask for a restore
