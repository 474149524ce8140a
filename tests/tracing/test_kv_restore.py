"""A chat that swaps its model back in has the KV restore in its trace: server span, queue
wait, model load, then the restore of the slots saved when it was swapped out."""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from tests.support.harness import RouterHarness, chat
from tests.tracing.conftest import Spans, chain, trace_of

CHAT = "/v1/chat/completions"


async def test_the_restore_is_a_child_of_the_load_it_follows(
    harness: RouterHarness, spans: Spans
) -> None:
    for model in ("chat-a", "chat-b"):
        harness.model(model, router_kv_persist="on")
    harness.faults["llamacpp"] = "--slot-actions"
    client = await harness.start()  # one runtime per lane: each request swaps
    answers = []
    for model in ("chat-a", "chat-b", "chat-a"):
        answer = await client.post(CHAT, json=chat(model, max_tokens=2))
        assert answer.status_code == 200, answer.text
        answers.append(answer)
    trace_id = answers[-1].headers["X-Trace-Id"]

    def restored(found: object) -> bool:
        return any(trace_of(s) == trace_id and s.kind is SpanKind.SERVER for s in spans.finished())

    found = [s for s in await spans.until(restored) if trace_of(s) == trace_id]
    restore = next(s for s in found if s.name == "kv restore")
    assert chain(restore, found) == ["kv restore", "model load", "queue wait", f"POST {CHAT}"]
    assert restore.attributes is not None
    assert restore.attributes["tensor_router.kv.result"] == "ok"
    assert restore.attributes["tensor_router.kv.slots"] >= 1
    # The first load of chat-a restored nothing: its span says so.
    first = [s for s in spans.named("kv restore") if trace_of(s) != trace_id]
    assert first and first[0].attributes is not None
    assert first[0].attributes["tensor_router.kv.result"] == "none"
