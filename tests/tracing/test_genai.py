"""The backend span against the OpenTelemetry GenAI conventions: every gen_ai.* name the router
sets is one the convention defines (from the semantic-conventions package, not retyped here),
none of the deprecated ones; the values map the backend's own usage report; no prompt or
answer text anywhere in a trace."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes, http_attributes, server_attributes
from opentelemetry.trace import SpanKind

from router.inference import traced
from tests.support.harness import RouterHarness
from tests.tracing.conftest import Spans

SECRET = "zebra quartz lantern"  # prompt text that must appear in no span
DEPRECATED = {
    gen_ai.GEN_AI_USAGE_PROMPT_TOKENS,
    gen_ai.GEN_AI_USAGE_COMPLETION_TOKENS,
    gen_ai.GEN_AI_SYSTEM,
    gen_ai.GEN_AI_PROMPT,
    gen_ai.GEN_AI_COMPLETION,
}
DEFINED = {v for k, v in vars(gen_ai).items() if k.startswith("GEN_AI_")} - DEPRECATED
OPERATIONS = {v.value for v in gen_ai.GenAiOperationNameValues}
FORBIDDEN = {gen_ai.GEN_AI_INPUT_MESSAGES, gen_ai.GEN_AI_OUTPUT_MESSAGES}


def test_llama_server_timings_map_to_the_usage_attributes() -> None:
    tail = b'"timings":{"prompt_n":5,"cache_n":7,"predicted_n":3}}'
    assert traced.usage(tail) == {
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: 12,  # cached tokens included
        gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 7,
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: 3,
    }


def test_an_openai_usage_report_maps_with_its_cached_part() -> None:
    tail = (
        b'"usage":{"prompt_tokens":20,"completion_tokens":4,"total_tokens":24,'
        b'"prompt_tokens_details":{"cached_tokens":16}}}'
    )
    assert traced.usage(tail) == {
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: 20,
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: 4,
        gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 16,
    }
    assert traced.usage(b"no usage here") == {}


def test_operations_are_the_conventions_values() -> None:
    paths = ["/v1/chat/completions", "/v1/completions", "/completion", "/v1/embeddings", "/x"]
    assert [traced.operation(p) for p in paths] == [
        "chat",
        "text_completion",
        "text_completion",
        "embeddings",
        "generate_content",
    ]
    assert {traced.operation(p) for p in paths} <= OPERATIONS


def _texts(span: ReadableSpan) -> list[str]:
    values = [str(v) for v in (span.attributes or {}).values()]
    for event in span.events:
        values += [str(v) for v in (event.attributes or {}).values()]
    return [span.name, *values]


async def test_a_chat_and_a_cached_completion_carry_the_genai_attributes(
    harness: RouterHarness, spans: Spans
) -> None:
    harness.model("m1")
    harness.faults["llamacpp"] = "--slot-actions"
    client = await harness.start()
    body = {"model": "m1", "messages": [{"role": "user", "content": SECRET}], "max_tokens": 3}
    answer = await client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    usage = answer.json()["usage"]
    native = {"model": "m1", "prompt": SECRET, "n_predict": 2}
    for _ in range(2):  # the second finds the prompt in the slot: cached input
        assert (await client.post("/completion", json=native)).status_code == 200

    def three(found: object) -> bool:
        return sum(s.kind is SpanKind.CLIENT for s in spans.finished()) == 3

    found = await spans.until(three)
    chat, first, second = [s for s in found if s.kind is SpanKind.CLIENT]
    assert chat.name == "chat m1" and second.name == "text_completion m1"
    attrs = dict(chat.attributes or {})
    assert attrs[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
    assert attrs[gen_ai.GEN_AI_REQUEST_MODEL] == "m1"
    assert attrs[gen_ai.GEN_AI_PROVIDER_NAME] == "tensor_router.llamacpp"
    assert attrs[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == usage["prompt_tokens"]
    assert attrs[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["completion_tokens"]
    assert attrs[gen_ai.GEN_AI_REQUEST_STREAM] is False
    assert attrs[server_attributes.SERVER_ADDRESS] == "127.0.0.1"
    assert attrs[http_attributes.HTTP_RESPONSE_STATUS_CODE] == 200
    assert error_attributes.ERROR_TYPE not in attrs
    cached = dict(second.attributes or {})
    assert cached[gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] > 0
    assert (first.attributes or {})[gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 0
    for span in spans.finished():
        names = {k for k in (span.attributes or {}) if k.startswith("gen_ai.")}
        assert names <= DEFINED and not names & FORBIDDEN, (span.name, names)
        assert not any(SECRET in text for text in _texts(span)), span.name
