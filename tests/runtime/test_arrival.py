"""router/runtime/arrival.py: turns leave admission in arrival order, even when one in the
middle is cancelled or leaves early."""

from __future__ import annotations

import asyncio

from router.runtime.arrival import ArrivalOrder, Turn


async def _settle() -> None:
    """Let every ready task run until it blocks. Turns of the event loop, not time: a task
    waiting on an unset event stays blocked however many turns pass."""
    for _ in range(10):
        await asyncio.sleep(0)


async def _passes(turn: Turn, log: list[str], name: str) -> None:
    try:
        await turn.wait()
        log.append(name)
    finally:
        turn.leave()


async def test_turns_pass_in_arrival_order() -> None:
    order, log = ArrivalOrder(), []
    first, second, third = order.enter(), order.enter(), order.enter()
    tasks = [asyncio.create_task(_passes(t, log, n)) for t, n in ((third, "c"), (second, "b"))]
    await _settle()
    assert log == []  # both wait for the first
    await _passes(first, log, "a")
    await asyncio.gather(*tasks)
    assert log == ["a", "b", "c"]


async def test_a_cancelled_turn_does_not_let_a_later_one_overtake() -> None:
    order, log = ArrivalOrder(), []
    first, second, third = order.enter(), order.enter(), order.enter()
    middle = asyncio.create_task(_passes(second, log, "b"))
    last = asyncio.create_task(_passes(third, log, "c"))
    await _settle()
    middle.cancel()  # the client went away: its turn leaves early
    await asyncio.wait([middle])
    await _settle()
    assert log == [] and not last.done()  # still behind the first
    await _passes(first, log, "a")
    await last
    assert log == ["a", "c"]
