"""R13: a lease that starts after a release cancels the idle timer that release armed.

The explicit load releases its lease at once and arms the idle timer; a stream that starts
right after and runs longer than `idle_unload` must keep the model loaded, and the idle
period counts from the stream's release. (A timer left armed fired mid-stream and unloaded
the model the instant the stream ended: audit mutation M16.)
"""

from __future__ import annotations

import time

from tests.support.harness import RouterHarness, chat, wait_for


async def test_r13_a_lease_after_a_release_is_not_cut_by_the_earlier_idle_timer(
    harness: RouterHarness,
) -> None:
    idle = 0.5
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--token-rate 5"
    client = await harness.start(harness.settings(idle_unload=idle))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    states: list[str] = []
    body = chat("chat-a", stream=True, max_tokens=10)  # ~2 s, four idle periods
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line:
                states.append(harness.runtimes.status_of("chat-a"))
        released = time.monotonic()
    assert states and set(states) == {"ready"}, "unloaded while the lease was held"
    assert await wait_for(lambda: harness.runtimes.status_of("chat-a") != "ready", idle + 3)
    unloaded_after = time.monotonic() - released
    assert unloaded_after >= idle - 0.05, f"unloaded {unloaded_after:.2f}s after the release"
    assert harness.runtimes.spawn_count == 1
