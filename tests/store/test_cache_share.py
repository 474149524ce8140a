"""The cached share of prompt tokens per model over its recent requests (issue 33): read from
the usage each answer reported, stored per request (`cached_tokens`), summed per model."""

from __future__ import annotations

import time
from pathlib import Path

from router.store.cache_share import RECENT, WINDOW
from tests.support.harness import raw_record
from tests.support.store import open_store


def _openai(prompt: int, cached: int) -> bytes:
    usage = f'"prompt_tokens":{prompt},"completion_tokens":2,"total_tokens":{prompt + 2}'
    return f'{{"usage":{{{usage},"prompt_tokens_details":{{"cached_tokens":{cached}}}}}}}'.encode()


async def test_the_share_counts_requests_that_reported_a_cached_count(tmp_path: Path) -> None:
    store = await open_store(tmp_path, writer_process=False)
    now = time.time()
    try:
        # chat-a: 700 of 1,200 cached, then an Ollama answer (no field) that must not count,
        # and an old request outside the window.
        store.record_raw(raw_record(wall=now - 5, model="chat-a", tail=_openai(400, 0)))
        store.record_raw(raw_record(wall=now - 4, model="chat-a", tail=_openai(800, 700)))
        ollama = b'{"done":true,"prompt_eval_count":900,"eval_count":3}'
        store.record_raw(raw_record(wall=now - 3, model="chat-a", tail=ollama))
        store.record_raw(raw_record(wall=now - WINDOW - 60, model="chat-a", tail=_openai(5000, 0)))
        anthropic = b'"usage":{"cache_read_input_tokens":30,"input_tokens":10,"output_tokens":1}'
        store.record_raw(raw_record(wall=now - 2, model="chat-b", tail=anthropic))
        await store.flush()
        shares = await store.cache_shares.recent(["chat-a", "chat-b", "idle"], now)
    finally:
        await store.close()
    assert shares["chat-a"] == {
        "requests": 2,
        "prompt_tokens": 1200,
        "cached_tokens": 700,
        "share": 700 / 1200,
    }
    assert shares["chat-b"]["share"] == 30 / 40
    assert shares["idle"] == {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0, "share": None}


async def test_only_the_most_recent_requests_count(tmp_path: Path) -> None:
    store = await open_store(tmp_path, writer_process=False)
    now = time.time()
    try:
        # RECENT fully cached requests, preceded by uncached ones that have aged out of the count.
        for i in range(RECENT + 20):
            cached = 100 if i >= 20 else 0
            store.record_raw(raw_record(wall=now - 1000 + i, model="m", tail=_openai(100, cached)))
        await store.flush()
        shares = await store.cache_shares.recent(["m"], now)
    finally:
        await store.close()
    assert shares["m"]["requests"] == RECENT and shares["m"]["share"] == 1.0
