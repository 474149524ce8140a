"""The in-flight registry the graceful stop drains (router/edge/inflight.py, R27)."""

from __future__ import annotations

import asyncio

from router.edge.inflight import DRAIN_DEADLINE, InFlight


async def test_drain_returns_when_the_last_request_ends() -> None:
    registry, release = InFlight(), asyncio.Event()

    async def request() -> None:
        with registry.held():
            await release.wait()

    task = asyncio.create_task(request())
    await asyncio.sleep(0)
    assert len(registry) == 1 and bool(registry)
    drain = asyncio.create_task(registry.drain(30))
    await asyncio.sleep(0.05)
    assert not drain.done() and registry.closing  # waits on the event, not a timer
    release.set()
    assert await asyncio.wait_for(drain, 5) is True
    await task
    assert len(registry) == 0 and not registry.past_deadline


async def test_the_deadline_cancels_what_runs_and_lets_it_end_in_its_own_way() -> None:
    registry = InFlight()
    ended: list[str] = []

    async def stream() -> None:
        with registry.held():
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError as exc:
                if not registry.ending():
                    raise
                ended.append(str(exc.args[0]) if exc.args else "")

    async def job() -> None:
        await asyncio.Event().wait()

    streaming = asyncio.create_task(stream())
    background = asyncio.create_task(job())
    registry.hold_task(background)
    await asyncio.sleep(0)
    assert len(registry) == 2
    assert await registry.drain(0.1) is False
    assert ended == [DRAIN_DEADLINE]  # the stream ended itself, its task not cancelled
    assert streaming.done() and not streaming.cancelled()
    assert background.cancelled() and len(registry) == 0


async def test_ending_is_false_for_other_cancellations() -> None:
    registry = InFlight()

    async def stream() -> bool:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return registry.ending()
        return True

    task = asyncio.create_task(stream())
    await asyncio.sleep(0)
    task.cancel()
    assert await task is False
