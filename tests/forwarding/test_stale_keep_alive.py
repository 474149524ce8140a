"""A backend that closes a keep-alive connection just as the router reuses it.

Seen on the real llama-server in whole-suite runs (S27's bystander after a long stream got a
502 "Server disconnected" / "Can not write request body" from a live backend). A clean close
before any answer on a pooled connection is sent once more on another connection
(router/forwarding/proxy.py `closed_keep_alive`); a reset stays a 502 (R31,
tests/forwarding/test_slow_death.py). The fake's `--close-reused-once` closes the first
request that arrives on a connection that served one before.
"""

from __future__ import annotations

from tests.support.harness import RouterHarness, chat

CHAT = "/v1/chat/completions"


async def test_a_closed_keep_alive_connection_is_not_a_502(harness: RouterHarness) -> None:
    record = harness.tmp / "requests.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--close-reused-once --record-requests {record}"
    client = await harness.start()
    for _ in range(3):  # the router's pool reuses its connection to the backend
        r = await client.post(CHAT, json=chat("chat-a", max_tokens=2))
        assert r.status_code == 200, r.text
    lines = record.read_text().splitlines()
    assert sum('"closed-reused"' in line for line in lines) == 1, lines  # it did close one
    assert harness.runtimes.spawn_count == 1  # a live backend: not relaunched
