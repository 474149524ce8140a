"""Property: whatever arrives at a route of the table, the router itself never answers 500.

A real router with fake backends (text, embeddings, sd-server image, whisper voice, and a vLLM
model with dynamic LoRA) takes malformed JSON, wrong JSON types for the fields handlers read,
wrong methods, odd query strings (repeated keys, non-UTF-8 percent escapes, huge values) and
odd content types at every template of `router.classify.ROUTES`, path parameters filled in.
Beside the hypothesis run, a sweep sets each field a handler reads to each JSON type in turn
(random draws alone reach a given field of a given route too rarely to be a regression test).

A 5xx is accepted only when it can be told apart from a router fault: the fake backend marks
every answer it sends (`X-Fake-Pid`), and the router's own deliberate 5xx (501 not supported,
502/503/504 upstream trouble) carry its error shape with their own error type. A 500 that the
router made is a failure, whatever its body says.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from router.api.inference.anthropic import check_messages
from router.api.inference.comfy import history_edits
from router.classify import ROUTES, BodyMode, Route
from router.errors import BadRequest
from tests.support.harness import RouterHarness

pytestmark = pytest.mark.timeout(240)

MODELS = ("chat-a", "embed", "art", "art-art", "ears", "vl", "nope")
# Never fuzzed: it stops the router under test (its body is never read).
SKIP = {("/router/v1/shutdown", "POST")}
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
DELIBERATE_5XX = {
    501: "not_supported_error",
    502: "upstream_error",
    503: "unavailable_error",
    504: "timeout_error",
}
_PARAM = re.compile(r"\{(\w+)(?::[^{}]+)?\}")
PARAM_VALUES: dict[str, tuple[str, ...]] = {
    "tail": (
        "x",
        "txt2img",
        "a/b",
        "generate",
        "models",
        "chat/completions",
        "%ff",
        "j",
        "session",
        "load",
    ),
    "kind": ("llama", "whispercpp", "nope", "%ff"),
    "model_id": MODELS,
    "prompt_id": ("12345678-0000-0000-0000-000000000001", "x", "%ff"),
    "attempt_id": ("1", "x" * 300, "%ff", "-1"),
    "id": ("resp_1_0", "x", "%ff"),
    "job_id": ("0" * 32, "x", "%ff"),
    "path": ("v1/models", "v1/chat/completions", "x", "%ff"),  # /router/v1/node/inference/...
    "cook_id": ("x", "chat-a", "%ff", "a b"),
    "config_id": ("chat-a", "x.kcpps", "%ff", "-x"),
    "sha256": ("0" * 64, "x", "%ff"),
    "name": ("chat-a", "x", "%ff", "a b"),  # /router/v1/keys/{name}: the key the sweep made
    "lease_id": ("x", "0" * 32, "%ff"),  # /router/v1/node/rpc/leases/{lease_id}
}

# ---- strategies -------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(MODELS)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
messages = st.lists(
    st.dictionaries(
        st.sampled_from(["role", "content", "images", "tool_calls", "name", "thinking"]),
        json_values | st.sampled_from(["user", "assistant", "system", "tool", "hi"]),
        max_size=4,
    ),
    max_size=3,
)
options = st.dictionaries(
    st.sampled_from(["temperature", "top_k", "seed", "num_predict", "stop", "num_ctx", "x"]),
    json_values,
    max_size=3,
)
SPECIAL = {"model": st.sampled_from(MODELS), "messages": messages, "options": options}
# The fields each router-local handler reads; proxied routes get the common selector fields.
READS: dict[str, tuple[str, ...]] = {
    "control.load": ("model", "lane"),
    "keys.create": ("name", "models", "priority", "max_concurrent", "daily_tokens"),
    "keys.change": ("models", "priority", "max_concurrent", "daily_tokens"),
    # No sane backend_id is ever drawn: a fuzzed init must not start a real build.
    "site.backends_init": ("node_id", "backend_id", "profile"),
    "site.backends_init_cancel": ("node_id", "backend_id"),
    "site.launch_options_set": ("node_id", "backend_id", "options"),
    "control.unload": ("target",),
    "site.models_state_set": ("node_id", "local_id", "model", "enabled", "disabled"),
    "ollama.show": ("model", "name", "verbose"),
    "ollama.chat": (
        "model",
        "messages",
        "stream",
        "options",
        "format",
        "keep_alive",
        "tools",
        "think",
    ),
    "ollama.generate": (
        "model",
        "prompt",
        "suffix",
        "images",
        "system",
        "template",
        "raw",
        "stream",
        "options",
        "format",
        "context",
        "keep_alive",
    ),
    "ollama.embed": ("model", "input", "truncate", "dimensions", "options", "keep_alive"),
    "ollama.embeddings": ("model", "prompt", "options", "keep_alive"),
    "sdapi.options": ("sd_model_checkpoint", "samples_format"),
    "comfy.prompt": ("prompt", "prompt_id", "number", "client_id"),
    "comfy.history": ("delete", "clear", "max_items"),
    "comfy.upload": ("model",),
    "voice.transcribe": (
        "model",
        "audio_data",
        "prompt",
        "langcode",
        "language",
        "suppress_non_speech",
    ),
    "voice.speech": ("model", "input", "voice"),
    "vllm.admin": ("lora_name", "lora_path", "model"),
    "images.forward": ("model", "prompt", "sd_model_checkpoint", "override_settings", "n"),
    "responses.create": ("model", "input", "stream", "previous_response_id", "store"),
    "responses.follow": ("model", "stream"),
    "anthropic.messages": ("model", "messages", "max_tokens", "stream"),
    "site.webuis_session": ("id", "enabled", "node_id"),
    "site.webuis_load": ("id", "model_id", "image_id", "node_id"),
}
COMMON = ("model", "messages", "prompt", "input", "stream", "max_tokens", "system")
WAV = (
    b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80>\x00\x00"
    b"\x00}\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00"
)
wrong_types = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=8),
    st.lists(scalars, max_size=2),
    st.dictionaries(st.text(max_size=4), scalars, max_size=2),
)
SANE: dict[str, Any] = {
    "model": "chat-a",
    "messages": [{"role": "user", "content": "hi"}],
    "prompt": "hi",
    "input": "hi",
    "stream": False,
    "max_tokens": 2,
    "lane": "text",
    "target": "image",
    "local_id": "chat-a",
    "enabled": True,
    "node_id": None,
    "name": "chat-a",
    "options": {},
    "sd_model_checkpoint": "art-art",
    "delete": [],
    "clear": False,
    "lora_name": "x",
    "lora_path": "x",
    "audio_data": base64.b64encode(WAV).decode(),
    "langcode": "en",
    "images": [],
    "id": "llama",
    "model_id": "chat-a",
    "models": ["chat-*"],
    "priority": "batch",
    "max_concurrent": 2,
    "daily_tokens": 1000,
}


@st.composite
def objects(draw: st.DrawFn, handler: str) -> bytes:
    """A JSON object with the fields `handler` reads: sane values, then some of any JSON type."""
    fields = READS.get(handler, COMMON)
    body = {name: SANE[name] for name in fields if name in SANE and draw(st.booleans())}
    for name in draw(st.lists(st.sampled_from(fields), max_size=3, unique=True)):
        body[name] = draw(SPECIAL.get(name, wrong_types) | wrong_types)
    return json.dumps(body).encode()


MALFORMED = (
    b"",
    b"   ",
    b"{",
    b'{"model":',
    b'{"model": "chat-a"',
    b"[]",
    b"null",
    b"0",
    b'"x"',
    b"1e999",
    b"NaN",
    b"\xff\xfe{}",
    b"{}{}",
    b'{"a":1} x',
    b"[" * 3000 + b"]" * 3000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b'{"model": "chat-a", "model": 5}',
    b"\x00",
    b'--x\r\nContent-Disposition: form-data; name="file"\r\n\r\nabc\r\n--x--\r\n',
)

CONTENT_TYPES = (
    None,
    "application/json",
    "text/plain",
    "application/octet-stream",
    "multipart/form-data; boundary=x",
    "multipart/form-data",
    "multipart/form-data; boundary=",
    "application/x-www-form-urlencoded",
    "application/json; charset=latin-1",
    ";;/",
    "image/png",
    "text/event-stream",
    "application/x-ndjson",
)
QUERY_KEYS = (
    "model",
    "from",
    "to",
    "bucket_seconds",
    "limit",
    "kind",
    "cursor",
    "node",
    "node_id",
    "after_sequence",
    "max_items",
    "filename",
    "subfolder",
    "type",
    "status",
    "backend",
    "sd_model_checkpoint",
    "stream",
)
RAW_VALUES = (
    "",
    "%ff",
    "%c3%28",
    "%ed%a0%80",
    "%00",
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1e999",
    "9" * 5000,
    "x" * 3000,
    "y" * 9000,
    "2026-13-45T99:00",
    "1700000000",
    "..%2f..%2fetc",
    "%2e%2e",
    "a%20b",
    "%",
    "%g1",
    "chat-a",
    "art-art",
    "output",
    base64.urlsafe_b64encode(b"[" * 3000).decode(),  # a cursor nested past the parser's limit
)
query_values = st.sampled_from(RAW_VALUES) | st.text(max_size=10).map(quote)
queries = st.lists(
    st.tuples(st.sampled_from(QUERY_KEYS) | st.text(max_size=4).map(quote), query_values),
    max_size=5,
).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
FUZZ_ROUTES = tuple(r for r in ROUTES if all((r.template, m) not in SKIP for m in r.methods))
PARSED = tuple(r for r in FUZZ_ROUTES if r.handler in READS)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, bytes, dict[str, str]]:
    # Half the draws go to the routes whose bodies the router parses itself.
    route: Route = draw(st.sampled_from(PARSED if draw(st.booleans()) else FUZZ_ROUTES))
    path = _PARAM.sub(lambda m: draw(st.sampled_from(PARAM_VALUES[m.group(1)])), route.template)
    allowed = sorted(route.allowed - {m for t, m in SKIP if t == route.template})
    # Of ten draws: one any method, four an odd content type, two a malformed body.
    odd = draw(st.integers(0, 9))
    method = draw(st.sampled_from(METHODS if odd == 0 else allowed))
    if (route.template, method) in SKIP:
        method = "GET"
    query = draw(queries)
    headers: dict[str, str] = {}
    ctype = draw(st.sampled_from(CONTENT_TYPES) if odd < 4 else st.just("application/json"))
    if ctype is not None:
        headers["Content-Type"] = ctype
    if draw(st.booleans()):
        headers["X-Tensors-Model"] = draw(st.sampled_from(MODELS) | st.text(max_size=5).map(quote))
    if method in ("GET", "HEAD") and odd > 2:
        body = b""
    elif odd in (1, 2):
        body = draw(st.sampled_from(MALFORMED) | st.binary(max_size=40))
    else:
        body = draw(objects(route.handler))
    return method, path + ("?" + query if query else ""), body, headers


# ---- judging an answer ------------------------------------------------------------------------


def router_fault(status: int, headers: httpx.Headers, body: bytes) -> str | None:
    """Why this answer is a 5xx the router made itself (None when it is not one)."""
    if status < 500 or "x-fake-pid" in headers:
        return None
    wanted = DELIBERATE_5XX.get(status)
    if wanted is None:
        return f"the router answered {status}"
    try:
        payload: Any = json.loads(body)
    except ValueError:
        return f"a {status} without the router's error shape"
    error = payload.get("error") if isinstance(payload, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    if kind is None and isinstance(payload, dict) and isinstance(payload.get("detail"), dict):
        kind = payload["detail"].get("type")  # the Kobold shape
    if kind is None and isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return None  # Ollama's shape carries no type; its status is the router's deliberate one
    return None if kind == wanted else f"a {status} of type {kind!r}"


async def exchange(
    client: httpx.AsyncClient, method: str, url: str, body: bytes, headers: dict[str, str]
) -> tuple[int, httpx.Headers, bytes]:
    """Status, headers and up to 64 KB of the body (event streams never end on their own)."""
    async with client.stream(method, url, content=body, headers=headers) as resp:
        seen = b""
        if resp.headers.get("content-type", "").startswith("application/json"):
            async for chunk in resp.aiter_bytes():
                seen += chunk
                if len(seen) > 65536:
                    break
        return resp.status_code, resp.headers, seen


# What each run loads first: the llama.cpp family of backends, or vLLM (whose operational
# routes and LoRA bodies are only read while a vLLM model runs).
PRELOAD = {"native": ("chat-a", "embed", "art-art", "ears"), "vllm": ("vl", "art-art", "ears")}


@pytest.fixture(params=sorted(PRELOAD))
async def router(request: pytest.FixtureRequest, harness: RouterHarness) -> RouterHarness:
    harness.faults["llamacpp"] = "--tokens 2"
    harness.faults["vllm"] = "--tokens 2"
    harness.model("chat-a")
    harness.model("embed", embeddingsmodel="embed.gguf")
    harness.model("art", sdmodel="art.safetensors")
    harness.model("ears", whispermodel="ggml-base.bin")
    harness.model("vl", "vllm", model_param="vl-text.safetensors", serve_args=["--enable-lora"])
    # Every download action is a row now: with the hub on, a fuzzed search would go out to
    # the network. Off, each answers the service's 503, as the old catch-all reached it.
    settings = harness.settings()
    off = settings.downloads.model_copy(update={"enabled": False})
    client = await harness.start(settings.model_copy(update={"downloads": off}))
    for model in PRELOAD[request.param]:
        r = await client.post("/router/v1/load", json={"model": model})
        assert r.status_code == 200, r.text
    return harness


# ---- every field the router reads, with every JSON type ---------------------------------------

WRONG: tuple[Any, ...] = (None, True, 0, -1, 2**70, 1.5, "", "x", [], [1], {}, {"a": 1})
# Paths for templates with parameters, so the sweep reaches each handler's body code.
SWEEP_PATHS = {
    "/v1/images/{tail:.+}": "/v1/images/generations",
    "/sdapi/v1/{tail:.+}": "/sdapi/v1/txt2img",
    "/sdcpp/v1/{tail:.+}": "/sdcpp/v1/img_gen",
    "/v1/responses/{id}/cancel": "/v1/responses/resp_1_0/cancel",
}


def sweep() -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, body): each field a handler reads set to each JSON type, the rest sane.

    Forwarded routes read only the model selector, so there only `model` varies.
    """
    cases = []
    for route in FUZZ_ROUTES:
        methods = sorted(route.methods & {"POST", "PUT", "PATCH"})
        if not methods or route.body is not BodyMode.JSON and route.body is not BodyMode.CONTROL:
            continue
        fields = READS.get(route.handler, ("model",))
        path = SWEEP_PATHS.get(route.template) or _PARAM.sub(
            lambda m: PARAM_VALUES[m.group(1)][0], route.template
        )
        sane = {name: SANE[name] for name in fields if name in SANE}
        for field in fields:
            cases += [(methods[0], path, {**sane, field: value}) for value in WRONG]
    return cases


async def test_every_field_with_every_json_type(router: RouterHarness) -> None:
    assert router.client is not None
    faults = []
    for method, path, body in sweep():
        raw = json.dumps(body).encode()
        status, headers, answer = await asyncio.wait_for(
            exchange(router.client, method, path, raw, {"Content-Type": "application/json"}), 60
        )
        fault = router_fault(status, headers, answer)
        if fault is not None:
            faults.append(f"{fault}: {method} {path} {raw[:200]!r} -> {answer[:200]!r}")
    assert faults == [], "\n".join(faults)


# ---- the property -----------------------------------------------------------------------------


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests())
async def test_the_router_never_answers_500_itself(
    router: RouterHarness, request: tuple[str, str, bytes, dict[str, str]]
) -> None:
    assert router.client is not None
    method, url, body, headers = request
    status, answer_headers, answer = await asyncio.wait_for(
        exchange(router.client, method, url, body, headers), 60
    )
    if method == "HEAD" and status >= 500:  # no body to judge: the same request as a GET
        status, answer_headers, answer = await asyncio.wait_for(
            exchange(router.client, "GET", url, body, headers), 60
        )
    event(f"status {status}")
    fault = router_fault(status, answer_headers, answer)
    assert fault is None, f"{fault}: {method} {url[:200]} {body[:200]!r} -> {answer[:300]!r}"


# ---- the refusals, one by one -----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw", [b"", b"{}", b'{"model": "chat-a"}', b'{"messages": "hi"}', b'{"messages": {}}', b"[]"]
)
def test_messages_check_wants_a_messages_list(raw: bytes) -> None:
    with pytest.raises(BadRequest) as refused:
        check_messages(raw)
    assert refused.value.status == 400
    assert refused.value.param == (None if raw in (b"", b"[]") else "messages")


def test_messages_check_takes_any_list() -> None:
    check_messages(b'{"model": "chat-a", "messages": []}')  # the backend judges the content


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"delete": 5}, "delete"),
        ({"delete": "abc"}, "delete"),
        ({"delete": [1]}, "delete"),
        ({"clear": "yes"}, "clear"),
        ({"clear": 1}, "clear"),
    ],
)
def test_history_edits_refuse_wrong_types(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as refused:
        history_edits(body)
    assert refused.value.param == param


def test_history_edits_read_the_comfy_shape() -> None:
    assert history_edits({}) == (False, [])
    assert history_edits({"clear": True, "delete": None}) == (True, [])
    assert history_edits({"delete": ["a", "b"], "max_items": 3}) == (False, ["a", "b"])


async def test_messages_without_a_list_never_reach_a_backend(
    harness: RouterHarness, tmp_path: Path
) -> None:
    record = tmp_path / "llama.jsonl"
    harness.faults["llamacpp"] = f"--record-requests {record}"
    harness.model("chat-a")
    client = await harness.start()
    for body in ({"model": "chat-a"}, {"model": "chat-a", "messages": "hi", "max_tokens": 2}):
        r = await client.post("/v1/messages", json=body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "messages"
    assert harness.runtimes.spawn_count == 0 and harness.records(record) == []
    r = await client.post("/v1/messages", json={"model": "chat-a", "messages": [], "max_tokens": 2})
    assert "x-fake-pid" in r.headers  # a body with a list goes to the backend as it was


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/router/v1/unload", {"target": ["image"]}, "target"),
        ("/router/v1/unload", {"target": {"lane": "image"}}, "target"),
        ("/router/v1/unload", {"target": None}, "target"),
        ("/router/v1/unload", {"target": ["text"], "forget_conversations": "chat-a"}, "target"),
        ("/router/v1/load", {"model": "chat-a", "lane": ["text"]}, "lane"),
        ("/router/v1/load", {"model": 5}, "model"),
        ("/router/v1/site/models/state", {"local_id": ["chat-a"], "enabled": True}, "local_id"),
        ("/router/v1/site/models/state", {"local_id": "chat-a", "enabled": "no"}, "enabled"),
        (
            "/router/v1/site/models/state",
            {"node_id": 1, "local_id": "chat-a", "enabled": True},
            "node_id",
        ),
        ("/history", {"delete": 5}, "delete"),
        ("/api/extra/transcribe", {"model": "ears", "audio_data": 5}, "audio_data"),
        (
            "/api/extra/transcribe",
            {"model": "ears", "audio_data": "UklGRg==", "prompt": 5},
            "prompt",
        ),
    ],
)
async def test_wrong_field_types_are_a_400_naming_the_field(
    harness: RouterHarness, path: str, body: dict[str, Any], param: str
) -> None:
    harness.model("chat-a")
    harness.model("art", sdmodel="art.safetensors")
    harness.model("ears", whispermodel="ggml-base.bin")
    client = await harness.start()
    r = await client.post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert harness.runtimes.spawn_count == 0  # refused before any backend was woken
