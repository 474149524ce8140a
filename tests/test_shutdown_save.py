"""The router's own shutdown saves each idle llama-server runtime's KV state, bounded by
`runtime.kv_shutdown_timeout` (docs/swaps.md, "The conversation library", "Restarts"), with
the fake backend's slot routes (`--slot-actions`; it has no /apply-template, so the library's
replay is refused and the slot save runs instead, as with an older llama-server)."""

from __future__ import annotations

import time

import pytest

from tests.support.harness import RouterHarness, chat

CHAT = "/v1/chat/completions"


async def _one_turn(h: RouterHarness, slot_delay: float, **runtime: object) -> None:
    h.faults["llamacpp"] = f"--slot-actions --slot-delay {slot_delay}"
    h.model("chat-a", router_kv_persist="on")
    client = await h.start(h.settings(kv_save_timeout=120, **runtime))
    answer = await client.post("/completion", json={"model": "chat-a", "prompt": "x" * 40})
    assert answer.status_code == 200, answer.text
    reply = await client.post(CHAT, json=chat("chat-a", max_tokens=2))
    assert reply.status_code == 200, reply.text


async def test_the_shutdown_saves_an_idle_runtime(harness: RouterHarness) -> None:
    await _one_turn(harness, 0.0)
    await harness.close()
    saved = list((harness.tmp / "data" / "kv-cache").glob("*/*-slot0.bin"))
    assert len(saved) == 1 and saved[0].read_text(), saved


@pytest.mark.timeout(60)
async def test_the_shutdown_save_is_cut_at_its_bound(harness: RouterHarness) -> None:
    await _one_turn(harness, 30.0, kv_shutdown_timeout=1)  # a save would take 30 s
    started = time.monotonic()
    await harness.close()
    assert time.monotonic() - started < 15  # the bound (1 s), the stop, a busy machine
    assert list((harness.tmp / "data" / "kv-cache").glob("*/*.bin")) == []
