"""Issue 36: per-model token counters on /metrics (prompt, completion, cached prompt tokens by
model and lane), read from each answer's usage report as the analytics row reads it."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from router.records import tokens
from router.records.metrics import Metrics
from router.records.recorder import Recorder, RequestInfo
from tests.support.harness import RouterHarness, chat

OPENAI = (
    b'"usage":{"prompt_tokens":40,"completion_tokens":7,"total_tokens":47,'
    b'"prompt_tokens_details":{"cached_tokens":32}}}'
)
OLLAMA = b'"done":true,"prompt_eval_count":12,"eval_count":5}'


def samples(text: str) -> dict[tuple[str, str, str], float]:
    """{(series, model, lane): value} of the token counters."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("tokens_total"):
                out[(s.name, s.labels["model"], s.labels["lane"])] = s.value
    return out


def info(model: str | None, lane: str | None = "text") -> RequestInfo:
    return RequestInfo("/v1/chat/completions", "openai", lane, time.monotonic(), time.time(), model)


def test_each_answers_usage_counts_under_its_model_and_lane() -> None:
    metrics = Metrics()
    recorder = Recorder(metrics, "node")
    recorder.record(info("chat-a"), status=200, tail=OPENAI)
    recorder.record(info("chat-a"), status=200, tail=OPENAI)
    recorder.record(info("chat-b", "embeddings"), status=200, tail=OLLAMA)
    recorder.record(info("chat-b", "embeddings"), status=200, tail=b'{"no":"usage"}')
    recorder.record(info(None), status=404, tail=OPENAI)  # no model: nothing to label
    got = samples(metrics.render().decode())
    assert got == {
        ("tensor_router_prompt_tokens_total", "chat-a", "text"): 80.0,
        ("tensor_router_completion_tokens_total", "chat-a", "text"): 14.0,
        ("tensor_router_cached_prompt_tokens_total", "chat-a", "text"): 64.0,
        ("tensor_router_prompt_tokens_total", "chat-b", "embeddings"): 12.0,
        ("tensor_router_completion_tokens_total", "chat-b", "embeddings"): 5.0,
    }
    recorder.record(info("chat-a"), status=200, tail=OPENAI)  # counted once, at the next scrape
    got = samples(metrics.render().decode())
    assert got[("tensor_router_prompt_tokens_total", "chat-a", "text")] == 120.0


def test_cached_tokens_in_each_spelling() -> None:
    assert tokens.cached_tokens(OPENAI) == 32
    assert tokens.cached_tokens(b'"cache_read_input_tokens": 9}') == 9  # Anthropic
    assert tokens.cached_tokens(b'"timings":{"cache_n":17,"prompt_n":3}') == 17  # llama-server
    assert tokens.cached_tokens(OLLAMA) is None


def test_answers_waiting_for_a_scrape_are_bounded() -> None:
    metrics = Metrics()
    recorder = Recorder(metrics, "node")
    for _ in range(tokens.PENDING_MAX * 3 + 1):
        recorder.record(info("chat-a"), status=200, tail=OLLAMA)
    assert len(metrics.tokens._pending) < tokens.PENDING_MAX  # folded as it went
    got = samples(metrics.render().decode())
    assert got[("tensor_router_prompt_tokens_total", "chat-a", "text")] == 12.0 * (
        tokens.PENDING_MAX * 3 + 1
    )


async def test_metrics_count_the_tokens_a_backend_reported(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    usage = {"prompt_tokens": 0, "completion_tokens": 0}
    for n in (2, 3):
        r = await client.post("/v1/chat/completions", json=chat("chat-a", max_tokens=n))
        assert r.status_code == 200, r.text
        for key in usage:
            usage[key] += r.json()["usage"][key]
    got = samples((await client.get("/metrics")).text)
    assert got == {
        ("tensor_router_prompt_tokens_total", "chat-a", "text"): float(usage["prompt_tokens"]),
        ("tensor_router_completion_tokens_total", "chat-a", "text"): 5.0,
    }
    assert usage["completion_tokens"] == 5
