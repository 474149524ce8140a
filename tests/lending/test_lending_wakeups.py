"""A held request waits for an event, never on a timer (docs/lending.md, "Held requests").

First the wake-up object alone (router/lending/leases.py `Wakeups`); then the owner's side of
a real router: a request held for its busy owner (the owner's backend leased, so it is at
`scheduling_backend_depth`) wakes on nothing until a lease is granted, and the grant releases
it within a few loop turns, with no timer involved; the request looked at its owner once
when it came and once when the grant woke it.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from router.appkeys import CATALOG, LENDING, RUNTIMES
from router.domain import Lane
from router.forwarding import ProxyResult, Selection
from router.lending import Lending, Link
from router.lending.leases import Lease, Wakeups
from router.lending.planner import apply_row
from router.lending.planning import PlanRow
from router.runtime import Lease as RuntimeLease
from tests.support.harness import RouterHarness

OWNER = ("text", "m", "slow")


async def turns(n: int) -> None:
    """Let the loop run `n` times (no timer: each is one pass over the ready callbacks)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_wait_ends_on_its_notify_and_on_nothing_else() -> None:
    wakeups = Wakeups()
    waiter = asyncio.create_task(wakeups.wait(OWNER, None))
    other = asyncio.create_task(wakeups.wait(("text", "m", "other"), None))
    await turns(20)
    wakeups.notify(("text", "m", "other"))  # another owner's event
    await turns(20)
    assert not waiter.done() and other.done()
    wakeups.notify(OWNER)
    await turns(5)
    assert waiter.done() and waiter.result() is True
    assert wakeups.woken == 2


async def test_a_wait_is_bounded() -> None:
    wakeups = Wakeups()
    assert await wakeups.wait(OWNER, 0.05) is False
    assert await wakeups.wait(OWNER, -1.0) is False  # past its bound already: no wait at all
    assert wakeups.woken == 0


async def test_a_notify_wakes_every_request_held_for_that_owner() -> None:
    wakeups = Wakeups()
    waiters = [asyncio.create_task(wakeups.wait(OWNER, None)) for _ in range(3)]
    await turns(3)
    wakeups.notify(OWNER)
    await turns(5)
    assert all(w.done() for w in waiters) and wakeups.woken == 3
    waiters[0] = asyncio.create_task(wakeups.wait(OWNER, None))  # a new wait needs a new event
    await turns(5)
    assert not waiters[0].done()
    waiters[0].cancel()


def lease_for(link: Link, slots: int = 1) -> Lease:
    return Lease(
        link.lane,
        link.owner_node_id,
        link.owner_model_id,
        link.helper_node_id,
        link.helper_model_id,
        load_helper_model=False,
        restore_helper_model=False,
        helper_slots=slots,
        probe=False,
        expires=time.monotonic() + 60.0,
        ttl_ms=60_000,
    )


async def held_for_busy_owner(
    harness: RouterHarness, lane: str
) -> tuple[Lending, Link, RuntimeLease, asyncio.Task[web.StreamResponse | None]]:
    """A router whose `slow` owns a link on `lane` to a node it does not know (a lent request
    comes straight back), `slow`'s backend leased (the owner at its depth, 1), and a request
    held for it; after half a second (ten of the old 50 ms polls) it has looked once."""
    harness.model("slow")
    await harness.start(harness.settings(queue_timeout=60))
    assert harness.app is not None
    app = harness.app
    lending = app[LENDING]
    # As a save would: the owner is busy at one request.
    lending.layers.values = lending.values.model_copy(update={"scheduling_backend_depth": 1})
    link = Link(lane, lending.node_id, "slow", "elsewhere", "fast")
    lending.links.links = (link,)
    config = next(c for c in app[CATALOG].all_configs() if c.id == "slow")
    owner_job = await app[RUNTIMES].ensure(config, Lane.TEXT)
    request = make_mocked_request("POST", "/v1/chat/completions", app=app)
    selection = Selection("slow", b'{"model": "slow"}', True)
    held = asyncio.create_task(lending.owner.lend(request, selection, (link,), ProxyResult()))
    # Held: the planner ran on "enqueued" and granted nothing (the helper is unknown).
    await asyncio.sleep(0.5)
    assert not held.done(), held.result()
    assert (link.lane, *link.owner) in lending.book.holding.held
    # One look when it came; none since (the old hold looked again every 50 ms).
    assert lending.book.holding.looks == 1, "the held request looked with nothing to see"
    assert lending.book.wakeups.woken == 0
    return lending, link, owner_job, held


async def test_a_grant_releases_the_held_request(harness: RouterHarness) -> None:
    # The image lane's link: a lease of it is taken with no context window to check.
    lending, link, owner_job, held = await held_for_busy_owner(harness, "image")
    row = PlanRow(link, "granted", (), lease_for(link))
    apply_row(lending.book, lending.decisions, row, "test")
    await turns(10)
    assert held.done(), "the grant did not release the held request at once"
    owner_job.release()
    assert held.result() is None  # lent, refused (helper unknown), back on its owner
    assert lending.book.wakeups.woken == 1 and lending.book.holding.looks == 2
    outcomes = [(d.kind, d.outcome) for d in lending.decisions.newest(10)][::-1]
    assert ("dispatch", "lent") in outcomes and ("dispatch", "returned") in outcomes


async def test_a_finished_owner_job_releases_the_held_request(harness: RouterHarness) -> None:
    lending, _, owner_job, held = await held_for_busy_owner(harness, "text")
    owner_job.release()  # however the job was leased, its end reaches the held request
    await turns(10)
    assert held.done(), "the owner's finished job did not release the held request at once"
    assert held.result() is None  # the owner has room: it runs there
    assert lending.book.wakeups.woken == 1 and lending.book.holding.looks == 2
    assert not lending.book.holding.held
