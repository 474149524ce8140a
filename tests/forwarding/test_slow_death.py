"""S27 on a busy machine: a backend that crashes closes its sockets at once, but its exit is
seen only later (a crash that frees gigabytes, two suites on two cores). Seen in a whole-suite
run: the real llama-server's exit came after the router's 0.25 s death grace, so the next
client got a 502 from the dying process instead of a relaunched backend. A closed port now
means "dying": the router awaits the exit (router/api/inference/serving.py `_backend_died`).
The fake's `--dying-for` closes every socket on the crash, then exits that much later.
"""

from __future__ import annotations

from tests.support.harness import RouterHarness, chat

CHAT = "/v1/chat/completions"


async def test_a_backend_that_dies_slowly_is_relaunched_for_the_next_client(
    harness: RouterHarness,
) -> None:
    record = harness.tmp / "bodies.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = (
        f"--crash-on-field n_probs --dying-for 1.5 --record-bodies {record}"
    )
    client = await harness.start()
    first = await client.post(CHAT, json=chat("chat-a", max_tokens=2))  # a pooled connection
    assert first.status_code == 200, first.text
    pids = harness.backend_pids()
    hostile = await client.post(CHAT, json={**chat("chat-a", max_tokens=2), "n_probs": 5})
    assert hostile.status_code == 502, hostile.text
    assert hostile.json()["error"]["type"] == "upstream_error"
    served = await client.post(CHAT, json=chat("chat-a", max_tokens=2))
    assert served.status_code == 200, served.text
    assert harness.backend_pids() and harness.backend_pids() != pids
    # Seen as dead like a fast crash: relaunched and sent once more (docs/reliability.md S27),
    # not answered 502 while the dying process was still being reaped.
    sent = [line for line in record.read_text().splitlines() if "n_probs" in line]
    assert len(sent) == 2, sent
