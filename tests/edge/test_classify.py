"""The route table: coverage of every family, 404/405 rules, invariants, fuzzing, docs sync."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router import classify as cl
from router.classify import ROUTES, BodyMode, Match, match, routes_markdown
from router.domain import Family, Lane, Role, Surface
from router.errors import MethodNotAllowed, RouteNotFound

DOC = Path(__file__).resolve().parents[2] / "docs" / "routes.md"

# (method, path, handler, lane, surface) for at least one member of every route family.
EXPECTED = [
    # OpenAI / Anthropic text
    ("POST", "/v1/chat/completions", "proxy", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/completions", "proxy", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/responses", "responses.create", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/responses/input_tokens", "proxy", Lane.TEXT, Surface.OPENAI),
    ("GET", "/v1/responses/resp_123", "responses.follow", Lane.TEXT, Surface.OPENAI),
    ("DELETE", "/v1/responses/resp_123", "responses.follow", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/responses/resp_123/cancel", "responses.follow", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/responses/render", "proxy", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/chat/completions/render", "proxy", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/completions/render", "proxy", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/chat/completions/batch", "proxy", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/messages", "anthropic.messages", Lane.TEXT, Surface.ANTHROPIC),
    ("POST", "/v1/messages/count_tokens", "proxy", Lane.TEXT, Surface.ANTHROPIC),
    ("POST", "/v1/messages/render", "proxy", Lane.TEXT, Surface.ANTHROPIC),
    # Kobold
    ("POST", "/api/v1/generate", "proxy", Lane.TEXT, Surface.KOBOLD),
    ("POST", "/api/extra/generate/stream", "proxy", Lane.TEXT, Surface.KOBOLD),
    ("POST", "/api/extra/tokencount", "proxy", Lane.TEXT, Surface.KOBOLD),
    # Ollama
    ("POST", "/api/show", "ollama.show", Lane.TEXT, Surface.OLLAMA),
    ("POST", "/api/generate", "ollama.generate", Lane.TEXT, Surface.OLLAMA),
    ("POST", "/api/chat", "ollama.chat", Lane.TEXT, Surface.OLLAMA),
    ("POST", "/api/embed", "ollama.embed", Lane.EMBEDDINGS, Surface.OLLAMA),
    ("POST", "/api/embeddings", "ollama.embeddings", Lane.EMBEDDINGS, Surface.OLLAMA),
    ("GET", "/api/tags", "ollama.tags", Lane.TEXT, Surface.OLLAMA),
    ("GET", "/api/ps", "ollama.ps", Lane.TEXT, Surface.OLLAMA),
    ("GET", "/api/version", "ollama.version", None, Surface.OLLAMA),
    # llama-server
    ("POST", "/completion", "proxy", Lane.TEXT, Surface.LLAMACPP),
    ("POST", "/completions", "proxy", Lane.TEXT, Surface.LLAMACPP),
    ("POST", "/tokenize", "proxy", Lane.TEXT, Surface.LLAMACPP),
    ("POST", "/detokenize", "proxy", Lane.TEXT, Surface.LLAMACPP),
    ("GET", "/props", "proxy", Lane.TEXT, Surface.LLAMACPP),
    ("GET", "/slots", "proxy", Lane.TEXT, Surface.LLAMACPP),
    ("POST", "/embedding", "proxy", Lane.EMBEDDINGS, Surface.LLAMACPP),
    ("POST", "/infill", "proxy", Lane.TEXT, Surface.LLAMACPP),
    ("POST", "/apply-template", "proxy", Lane.TEXT, Surface.LLAMACPP),
    # vLLM serving allowlist
    ("POST", "/classify", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    ("POST", "/score", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    ("POST", "/v1/score", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    ("POST", "/pooling", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    ("POST", "/generative_scoring", "proxy", Lane.TEXT, Surface.VLLM),
    ("POST", "/invocations", "proxy", Lane.TEXT, Surface.VLLM),
    ("POST", "/v2/embed", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    ("POST", "/v2/rerank", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    ("POST", "/cohere/v2/chat/render", "proxy", Lane.TEXT, Surface.VLLM),
    ("GET", "/v1/realtime", "realtime.connect", Lane.VOICE, Surface.OPENAI),
    # embeddings list of the spec
    ("POST", "/v1/embeddings", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    ("POST", "/api/extra/embeddings", "proxy", Lane.EMBEDDINGS, Surface.KOBOLD),
    ("POST", "/rerank", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    ("POST", "/v1/rerank", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    ("POST", "/v1/reranking", "proxy", Lane.EMBEDDINGS, Surface.EMBEDDINGS),
    # images
    ("POST", "/v1/images/generations", "images.forward", Lane.IMAGE, Surface.OPENAI),
    ("POST", "/v1/images/edits", "images.forward", Lane.IMAGE, Surface.OPENAI),
    ("POST", "/sdapi/v1/txt2img", "images.forward", Lane.IMAGE, Surface.A1111),
    ("GET", "/sdapi/v1/loras", "images.forward", Lane.IMAGE, Surface.A1111),
    ("GET", "/sdapi/v1/get_last.json", "images.forward", Lane.IMAGE, Surface.A1111),
    ("GET", "/sdapi/v1/options", "sdapi.options", Lane.IMAGE, Surface.A1111),
    ("POST", "/sdapi/v1/options", "sdapi.options", Lane.IMAGE, Surface.A1111),
    ("POST", "/sdapi/v1/refresh-checkpoints", "sdapi.refresh", Lane.IMAGE, Surface.A1111),
    ("POST", "/sdcpp/v1/vid_gen", "images.forward", Lane.IMAGE, Surface.SDCPP),
    ("GET", "/sdcpp/v1/jobs/job_1", "images.forward", Lane.IMAGE, Surface.SDCPP),
    ("POST", "/prompt", "comfy.prompt", Lane.IMAGE, Surface.COMFY),
    ("GET", "/queue", "proxy", Lane.IMAGE, Surface.COMFY),
    ("GET", "/history", "comfy.history", Lane.IMAGE, Surface.COMFY),
    ("GET", "/history/0b8e-4f", "comfy.history", Lane.IMAGE, Surface.COMFY),
    ("GET", "/view", "comfy.view", Lane.IMAGE, Surface.COMFY),
    ("GET", "/object_info", "proxy", Lane.IMAGE, Surface.COMFY),
    ("GET", "/object_info/KSampler", "proxy", Lane.IMAGE, Surface.COMFY),
    ("GET", "/system_stats", "proxy", Lane.IMAGE, Surface.COMFY),
    ("POST", "/interrupt", "proxy", Lane.IMAGE, Surface.COMFY),
    ("POST", "/upload/image", "comfy.upload", Lane.IMAGE, Surface.COMFY),
    # voice
    ("POST", "/v1/audio/speech", "voice.speech", Lane.VOICE, Surface.VOICE),
    ("POST", "/v1/audio/transcriptions", "voice.transcriptions", Lane.VOICE, Surface.VOICE),
    ("POST", "/v1/audio/translations", "voice.translations", Lane.VOICE, Surface.VOICE),
    ("GET", "/v1/audio/voices", "voice.speech", Lane.VOICE, Surface.VOICE),
    ("GET", "/audio/voices", "voice.speech", Lane.VOICE, Surface.VOICE),
    ("POST", "/api/extra/tts", "voice.speech", Lane.VOICE, Surface.VOICE),
    ("POST", "/api/extra/transcribe", "voice.transcribe", Lane.VOICE, Surface.VOICE),
    # music
    ("GET", "/musicui", "proxy", Lane.MUSIC, Surface.MUSIC),
    ("GET", "/musicui/assets/app.js", "proxy", Lane.MUSIC, Surface.MUSIC),
    ("POST", "/api/extra/music/generate", "proxy", Lane.MUSIC, Surface.MUSIC),
    # generic text catch-all
    ("POST", "/v1", "proxy", Lane.TEXT, Surface.OPENAI),
    ("POST", "/v1/chat/completions/control", "proxy", Lane.TEXT, Surface.OPENAI),
    ("GET", "/v1/health", "meta.health", None, Surface.OPENAI),  # answered, never forwarded
    # discovery, control, site, node, meta
    ("GET", "/v1/models", "models.openai_list", Lane.TEXT, Surface.OPENAI),
    ("GET", "/v1/models/hermes-8k", "models.openai_get", Lane.TEXT, Surface.OPENAI),
    ("GET", "/sdapi/v1/sd-models", "models.sd_list", Lane.IMAGE, Surface.A1111),
    ("GET", "/router/v1/models", "models.router_list", None, Surface.CONTROL),
    ("POST", "/router/v1/load", "control.load", None, Surface.CONTROL),
    ("POST", "/router/v1/unload", "control.unload", None, Surface.CONTROL),
    ("POST", "/router/v1/shutdown", "control.shutdown", None, Surface.CONTROL),
    ("GET", "/router/v1/events", "control.events", None, Surface.CONTROL),
    ("GET", "/router/v1/status", "control.status", None, Surface.CONTROL),
    ("GET", "/router/v1/site/models/state", "site.models_state", None, Surface.SITE),
    ("POST", "/router/v1/site/models/state", "site.models_state_set", None, Surface.SITE),
    ("GET", "/router/v1/site/analytics", "site.analytics", None, Surface.SITE),
    ("POST", "/router/v1/site/analytics/flush", "site.analytics_flush", None, Surface.SITE),
    ("GET", "/router/v1/site/load-errors", "site.load_errors", None, Surface.SITE),
    ("DELETE", "/router/v1/site/load-errors", "site.load_errors_clear", None, Surface.SITE),
    ("GET", "/router/v1/site/load-captures", "site.load_captures", None, Surface.SITE),
    ("GET", "/router/v1/site/load-captures/17", "site.load_capture", None, Surface.SITE),
    (
        "GET",
        "/router/v1/site/load-captures/17/output",
        "site.load_capture_output",
        None,
        Surface.SITE,
    ),
    ("GET", "/router/v1/site/store/download", "site.store_download", None, Surface.SITE),
    ("GET", "/router/v1/site/inventory", "site.inventory", None, Surface.SITE),
    ("POST", "/router/v1/site/nodes/backends/init", "site.backends_init", None, Surface.SITE),
    (
        "POST",
        "/router/v1/site/nodes/backends/init/cancel",
        "site.backends_init_cancel",
        None,
        Surface.SITE,
    ),
    (
        "GET",
        "/router/v1/site/nodes/backends/launch-options",
        "site.launch_options",
        None,
        Surface.SITE,
    ),
    (
        "POST",
        "/router/v1/site/nodes/backends/launch-options",
        "site.launch_options_set",
        None,
        Surface.SITE,
    ),
    ("GET", "/router/v1/site/download/jobs/j1", "site.download_job", None, Surface.SITE),
    ("GET", "/router/v1/site/webuis", "site.webuis_list", None, Surface.SITE),
    ("DELETE", "/router/v1/site/routing-groups", "site.routing_groups", None, Surface.SITE),
    ("POST", "/router/v1/site/text-routing-groups", "site.text_routing_groups", None, Surface.SITE),
    ("GET", "/router/v1/site/guardian-models", "site.guardian_models", None, Surface.SITE),
    ("DELETE", "/router/v1/site/cook/recipes", "site.cook_delete", None, Surface.SITE),
    ("GET", "/router/v1/site/config-file/a.kcpps", "site.config_file_read", None, Surface.SITE),
    ("POST", "/router/v1/site/model-files/hash", "site.model_file_hash", None, Surface.SITE),
    ("GET", "/router/v1/site/model-assets/abc", "site.assets_hash", None, Surface.SITE),
    ("GET", "/router/v1/benchmarks", "bench.list", None, Surface.CONTROL),
    ("POST", "/router/v1/benchmarks/run", "bench.run", None, Surface.CONTROL),
    ("GET", "/router/v1/vllm/health", "vllm.admin", None, Surface.VLLM),
    ("GET", "/router/v1/vllm/version", "vllm.admin", None, Surface.VLLM),
    ("GET", "/router/v1/vllm/load", "vllm.admin", None, Surface.VLLM),
    ("GET", "/router/v1/vllm/metrics", "vllm.admin", None, Surface.VLLM),
    ("GET", "/router/v1/vllm/tokenizer_info", "vllm.admin", None, Surface.VLLM),
    ("POST", "/router/v1/vllm/load_lora_adapter", "vllm.admin", None, Surface.VLLM),
    ("POST", "/router/v1/vllm/unload_lora_adapter", "vllm.admin", None, Surface.VLLM),
    ("POST", "/router/v1/vllm/scale_elastic_ep", "vllm.admin", None, Surface.VLLM),
    ("POST", "/router/v1/node/register", "node.register", None, Surface.NODE),
    ("GET", "/router/v1/node/load-captures/3/output", "node.site", None, Surface.NODE),
    ("GET", "/health", "meta.health", None, Surface.META),
    ("GET", "/metrics", "meta.metrics", None, Surface.META),
]


@pytest.mark.parametrize(("method", "path", "handler", "lane", "surface"), EXPECTED)
def test_every_family_is_classified(method, path, handler, lane, surface):
    route = match(method, path).route
    assert (route.handler, route.lane, route.surface) == (handler, lane, surface)


@pytest.mark.parametrize(
    "path",
    [
        "/slots/0",  # S23: slot save/restore/erase actions are not proxied
        "/slots/0/save",
        "/sleep",  # vLLM development, profiler, RPC, weight transfer
        "/wake_up",
        "/collective_rpc",
        "/start_profile",
        "/reset_prefix_cache",
        "/update_weights",
        "/inference/v1/generate",
        "/derender",
        "/ping",
        "/version",
        "/router/v1/vllm/sleep",
        "/router/v1/vllm/collective_rpc",
        "/api/admin/reload_config",  # KoboldCpp admin and other non-allowlisted paths
        "/api/extra/abort",
        "/api/extra/shutdown",
        "/api/v1/model",
        "/api/blobs/sha256:x",  # Ollama's blob upload: not answered
        "/nope",
        "/router/v1",
        "/router/v1/site",
        "/router/v1/node",
        "/sdapi/v1",
    ],
)
def test_unlisted_paths_are_404(path):
    with pytest.raises(RouteNotFound):
        match("POST", path)
    with pytest.raises(RouteNotFound):
        match("GET", path)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/../router/v1/shutdown",
        "/v1/./models",
        "/sdapi/v1/..",
        "/v1//chat/completions",
        "//v1/models",
        "/v1\\chat",
        "/v1/chat\x00",
        "/v1/a%2f..%2fb",
        "/v1/%2E%2E/x",
        "/view/%5c",
        "v1/models",
        "",
    ],
)
def test_unsafe_paths_are_404(path):
    with pytest.raises(RouteNotFound):
        match("GET", path)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/v1/models", ["GET", "HEAD"]),
        ("GET", "/v1/chat/completions", ["POST"]),
        ("GET", "/v1/responses/input_tokens", ["POST"]),  # exact rule wins over /v1/responses/{id}
        ("POST", "/v1/responses/r1", ["DELETE", "GET", "HEAD"]),
        ("PUT", "/router/v1/site/load-errors", ["DELETE", "GET", "HEAD"]),
        ("GET", "/router/v1/vllm/load_lora_adapter", ["POST"]),
        ("DELETE", "/sdapi/v1/options", ["GET", "HEAD", "POST"]),  # never falls to /sdapi/v1/{tail}
        ("GET", "/api/chat", ["POST"]),
        ("POST", "/api/tags", ["GET", "HEAD"]),
        ("POST", "/slots", ["GET", "HEAD"]),
        ("POST", "/props", ["GET", "HEAD"]),
        ("OPTIONS", "/v1/chat/completions", ["POST"]),
        ("post", "/v1/chat/completions", ["POST"]),  # methods are case-sensitive
    ],
)
def test_wrong_method_is_405_with_allow(method, path, allow):
    with pytest.raises(MethodNotAllowed) as info:
        match(method, path)
    assert info.value.allow == allow
    assert info.value.headers["Allow"] == ", ".join(allow)
    assert info.value.status == 405


def test_head_is_allowed_wherever_get_is():
    for route in ROUTES:
        assert ("HEAD" in route.allowed) == ("GET" in route.methods), route.template
        if "GET" in route.methods:
            path = _instantiate(route.template)
            m = match("HEAD", path)
            assert m.route.template == route.template and not m.state_changing


def test_trailing_slash_is_ignored_but_not_doubled():
    assert match("GET", "/v1/models/").route.handler == "models.openai_list"
    assert match("GET", "/router/v1/site/inventory/").route.handler == "site.inventory"
    with pytest.raises(RouteNotFound):
        match("GET", "/v1/models//")


def test_path_params_are_returned():
    assert dict(match("GET", "/history/abc-123").params) == {"prompt_id": "abc-123"}
    assert dict(match("POST", "/v1/responses/resp_9/cancel").params) == {"id": "resp_9"}
    assert dict(match("POST", "/sdcpp/v1/jobs/job_1/cancel").params) == {
        "tail": "jobs/job_1/cancel"
    }
    assert dict(match("GET", "/v1/models").params) == {}
    m = match("GET", "/router/v1/site/load-captures/42/output")
    assert m.route.handler == "site.load_capture_output" and m.params["attempt_id"] == "42"
    with pytest.raises(TypeError):
        m.params["attempt_id"] = "x"  # type: ignore[index]


def _instantiate(template: str) -> str:
    """A concrete path for a template: one segment per plain parameter, two for a tail."""
    return re.sub(
        r"\{(\w+)(?::[^{}]+)?\}", lambda m: "p1/p2" if ":" in m.group(0) else "p1", template
    )


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{sorted(r.methods)}{r.template}")
def test_no_route_is_shadowed_by_an_earlier_one(route):
    path = _instantiate(route.template)
    for method in route.methods:
        assert match(method, path).route is route


def test_roles_follow_the_spec():
    for r in ROUTES:
        t = r.template
        if t.startswith("/router/v1/node/"):
            assert r.role is Role.CLUSTER and r.surface is Surface.NODE
        elif t == "/router/v1/ui/session":  # the WebUI's sign-in (docs/security.md)
            assert r.role is Role.PUBLIC
        elif t.startswith(("/router/v1/", "/router/webuis/")):
            assert r.role is Role.ADMIN, t
        elif t in ("/health", "/"):  # "/": Ollama's liveness probe ("Ollama is running")
            assert r.role is Role.PUBLIC
        elif t == "/api/pull":  # downloads model files: an admin's act (docs/ollama.md)
            assert r.role is Role.ADMIN
        elif t.startswith("/router/ui"):  # the WebUI's static files: no data in them
            assert r.role is Role.PUBLIC and r.methods == {"GET"}, t
        elif t in ("/metrics", "/slots"):
            assert r.role is Role.ADMIN
        else:
            assert r.role is Role.INFERENCE, t
    public = {r.template for r in ROUTES if r.role is Role.PUBLIC}
    assert public == {"/health", "/", "/router/v1/ui/session", "/router/ui", "/router/ui/{tail:.*}"}


def test_origin_strict_on_every_ollama_and_llama_server_route():
    ollama = [r for r in ROUTES if r.surface is Surface.OLLAMA]
    llama = [r for r in ROUTES if r.surface is Surface.LLAMACPP]
    assert len(ollama) == 14 and len(llama) == 10
    assert all(r.origin_strict for r in ollama + llama)
    assert not match("GET", "/v1/models").route.origin_strict


def test_only_chat_completions_and_render_require_a_model():
    required = sorted(r.template for r in ROUTES if r.model_required)
    assert required == [
        "/cohere/v2/chat/render",  # vLLM render routes: the spec requires a selector
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/messages/render",
        "/v1/responses/render",
    ]


def test_state_changing_follows_methods():
    assert match("POST", "/router/v1/unload").route.state_changing
    assert not match("GET", "/api/tags").route.state_changing
    both = match("GET", "/sdapi/v1/options").route
    assert both.state_changing  # the route has an unsafe method ...
    assert not match("GET", "/sdapi/v1/options").state_changing  # ... this request does not
    assert match("POST", "/sdapi/v1/options").state_changing


VLLM_ALLOWLIST = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/chat/completions/batch"),
    ("POST", "/v1/chat/completions/render"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/completions/render"),
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/audio/transcriptions"),
    ("POST", "/v1/audio/translations"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/messages/render"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/responses/render"),
    ("GET", "/v1/responses/r1"),
    ("POST", "/v1/responses/r1/cancel"),
    ("POST", "/v1/score"),
    ("POST", "/v1/rerank"),
    ("POST", "/v2/embed"),
    ("POST", "/v2/rerank"),
    ("GET", "/v1/realtime"),
    ("POST", "/cohere/v2/chat/render"),
    ("POST", "/invocations"),
    ("POST", "/generative_scoring"),
    ("POST", "/pooling"),
    ("POST", "/classify"),
    ("POST", "/score"),
    ("POST", "/rerank"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
]


@pytest.mark.parametrize(("method", "path"), VLLM_ALLOWLIST)
def test_vllm_allowlist(method, path):
    route = match(method, path).route
    assert route.vllm and Family.VLLM in route.served_by


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/load_lora_adapter"),
        ("GET", "/v1/whatever"),
        ("DELETE", "/v1/responses/r1"),
        ("POST", "/v1/responses/input_tokens"),
        ("POST", "/completion"),
        ("POST", "/v1/audio/speech"),
    ],
)
def test_not_on_vllm_allowlist(method, path):
    assert not match(method, path).route.vllm


def test_table_invariants():
    handler_name = re.compile(r"^proxy$|^[a-z]+\.[a-z_]+$")
    for r in ROUTES:
        assert handler_name.match(r.handler), r.handler
        assert r.methods and r.methods <= {"GET", "POST", "PUT", "PATCH", "DELETE"}
        if r.handler == "proxy":
            assert r.served_by, f"{r.template}: a forwarded route names its backends"
            assert r.vllm == (Family.VLLM in r.served_by), r.template
        if r.methods <= cl.READ_METHODS and r.template != "/v1/realtime":
            assert r.body is BodyMode.NONE, r.template
        if r.lane is Lane.IMAGE and r.handler == "proxy" and r.body is not BodyMode.NONE:
            assert "sd_model_checkpoint" in r.selector.json_keys, r.template
    templates = [r.template for r in ROUTES]
    catch_all = templates.index("/v1/{tail:.+}")
    specific = [
        i for i, t in enumerate(templates) if t.startswith("/v1/") and t != templates[catch_all]
    ]
    assert max(specific) < catch_all


def test_docs_list_every_template_and_match_the_generator():
    text = DOC.read_text(encoding="utf-8")
    for route in ROUTES:
        assert f"`{route.template}`" in text, route.template
    assert routes_markdown() in text, "regenerate: python -m router.classify (see docs/routes.md)"


# ---- fuzzing --------------------------------------------------------------------------------

_SEGMENTS = sorted({seg for r in ROUTES for seg in r.template.split("/") if seg and "{" not in seg})
_segment = st.one_of(
    st.sampled_from(_SEGMENTS + ["..", ".", "", "%2e%2e", "x", "0"]),
    st.text(min_size=0, max_size=8),
)
_method = st.one_of(
    st.sampled_from(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"]),
    st.text(max_size=10),
)


def _check(method: str, path: str) -> None:
    try:
        m = match(method, path)
    except MethodNotAllowed as err:
        assert err.allow and method not in err.allow
        return
    except RouteNotFound:
        return
    assert isinstance(m, Match) and method in m.route.allowed


@settings(max_examples=400, deadline=None)
@given(method=_method, segments=st.lists(_segment, max_size=7), slash=st.booleans())
def test_fuzz_structured_paths(method, segments, slash):
    _check(method, "/" + "/".join(segments) + ("/" if slash else ""))


@settings(max_examples=300, deadline=None)
@given(method=_method, path=st.text(max_size=60))
def test_fuzz_arbitrary_paths(method, path):
    _check(method, path)
