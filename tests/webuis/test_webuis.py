"""The backend WebUI rules without processes: allow-lists, listener paths, redirect rewrites,
the catalog, tickets and sessions (router/webuis)."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.config import ModelConfig
from router.domain import BackendMode, Family, Lane
from router.runtime import RuntimeState, RuntimeView
from router.webuis import (
    BY_ID,
    KINDS,
    Listener,
    Node,
    Refused,
    TokenStore,
    api_path,
    backend_path,
    bridge_cookie,
    catalog,
    parse,
    referring_kind,
    rewrite_location,
    serving,
    what_to_load,
)
from tests.support.views import runtime_view

LLAMA, WHISPER, LITE = BY_ID["llama"], BY_ID["whispercpp"], BY_ID["kobold-lite"]
COMPONENT = {
    Lane.TEXT: "model_param",
    Lane.IMAGE: "sdmodel",
    Lane.VOICE: "whispermodel",
    Lane.MUSIC: "musicllm",
    Lane.EMBEDDINGS: "embeddingsmodel",
}


def config(model_id: str, mode: BackendMode, *lanes: Lane) -> ModelConfig:
    components = {COMPONENT[lane]: Path(f"/m/{model_id}-{lane}.gguf") for lane in lanes}
    image_id = f"{model_id}-img" if Lane.IMAGE in lanes else None
    return ModelConfig(
        model_id, Path(f"/k/{model_id}.kcpps"), {}, mode, components, frozenset(lanes), image_id
    )


def view(cfg: ModelConfig, family: Family, *lanes: Lane, **kw: object) -> RuntimeView:
    where = {"pid": 1, "port": 5000, "base_url": "http://127.0.0.1:5000"}
    return runtime_view(cfg, *lanes, family=family, **(where | kw))


NATIVE, KOBOLD = BackendMode.LLAMA_SDCPP, BackendMode.KOBOLD


# ---- allow-lists -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "tail", "method", "expected"),
    [
        ("llama", "", "GET", "/"),
        ("llama", "assets/app.js", "GET", "/assets/app.js"),
        ("llama", "v1/chat/completions", "POST", "/v1/chat/completions"),
        ("llama", "completion", "POST", "/completion"),
        ("llama", "props", "GET", "/props"),
        ("kobold-lcpp", "", "GET", "/lcpp/"),
        ("kobold-lcpp", "bundle.js", "GET", "/lcpp/bundle.js"),
        ("kobold-lcpp", "api/extra/generate/stream", "POST", "/api/extra/generate/stream"),
        ("kobold-sd", "", "GET", "/sdui/"),
        ("kobold-music", "api/extra/music/generate", "POST", "/api/extra/music/generate"),
        ("sdcpp", "sdcpp/v1/img_gen", "POST", "/sdcpp/v1/img_gen"),
        ("whispercpp", "inference", "POST", "/inference"),
        ("whispercpp", "", "HEAD", "/"),
    ],
)
def test_allowed_paths_map_onto_the_backend(
    kind: str, tail: str, method: str, expected: str
) -> None:
    assert backend_path(BY_ID[kind], tail, method) == expected


@pytest.mark.parametrize(
    ("kind", "tail", "method"),
    [
        ("whispercpp", "load", "POST"),  # swaps the model the router launched: never
        ("whispercpp", "load", "GET"),
        ("whispercpp", "inference", "GET"),
        ("llama", "props", "POST"),  # changes the server's defaults
        ("llama", "slots/0", "POST"),  # slot save/restore writes files
        ("llama", "anything", "POST"),  # not an API path: static files are read-only
        ("llama", "v1/models", "DELETE"),
        ("kobold-lite", "api/extra/shutdown", "POST"),
        ("kobold-lite", "api/extra/shutdown", "GET"),
        ("kobold-lcpp", "api/admin/reload_config", "POST"),
        ("kobold-music", "api/v1/generate", "POST"),  # a text API, not the music kind's
        ("sdcpp", "v1/chat/completions", "POST"),
    ],
)
def test_refused_paths(kind: str, tail: str, method: str) -> None:
    with pytest.raises(Refused):
        backend_path(BY_ID[kind], tail, method)


def test_every_kind_is_listed_once_with_a_ui_path_ending_in_a_slash() -> None:
    ids = [k.id for k in KINDS]
    assert ids == [
        "kobold-lite",
        "kobold-lcpp",
        "kobold-sd",
        "kobold-music",
        "llama",
        "sdcpp",
        "whispercpp",
    ]
    assert all(k.ui_path.startswith("/") and k.ui_path.endswith("/") for k in KINDS)


def test_root_calls_pass_only_the_kinds_api_paths() -> None:
    assert api_path(LITE, "/api/v1/generate", "POST") == "/api/v1/generate"
    assert api_path(WHISPER, "/v1/audio/transcriptions", "POST") == "/v1/audio/transcriptions"
    for kind, root, method in (
        (LITE, "/api/extra/shutdown", "POST"),  # denied
        (LITE, "/index.html", "GET"),  # static files: under the prefix only
        (LLAMA, "/props", "POST"),
        (WHISPER, "/load", "POST"),
    ):
        with pytest.raises(Refused):
            api_path(kind, root, method)


def test_the_referring_kind() -> None:
    host = "127.0.0.1:8081"
    assert referring_kind(f"http://{host}/router/webuis/kobold-lite/", host) == "kobold-lite"
    assert referring_kind(f"http://{host}/router/webuis/llama/c/1?x", host) == "llama"
    for referer in (
        None,
        "",
        f"http://{host}/router/webuis/llama",  # not a page under the prefix
        f"http://{host}/router/v1/site/webuis",
        "http://127.0.0.1:8080/router/webuis/llama/",  # the API's origin, not this one
        f"ftp://{host}/router/webuis/llama/",
    ):
        assert referring_kind(referer, host) is None, referer
    assert bridge_cookie("kobold-lite") == "tensors_router_backend_kobold_lite"


# ---- listener paths and redirects -------------------------------------------------------------


def test_listener_paths() -> None:
    found = parse("/router/webuis/llama/a/b.js", "/router/webuis/llama/a/b.js")
    assert found is not None and (found.kind_id, found.tail, found.slash) == (
        "llama",
        "a/b.js",
        True,
    )
    bare = parse("/router/webuis/llama", "/router/webuis/llama")
    assert bare is not None and not bare.slash
    for raw in (
        "/router/webuis/",
        "/router/webuis/llama/../../router/v1/site/webuis",
        "/router/webuis/llama/a%2fb",
        "/router/webuis/llama/%2e%2e/x",
        "/router/webuis/llama//etc",
        "/v1/chat/completions",
    ):
        assert parse(raw, raw) is None, raw


@pytest.mark.parametrize(
    ("kind", "location", "expected"),
    [
        ("llama", "http://127.0.0.1:5000/login?next=1", "/router/webuis/llama/login?next=1"),
        ("llama", "http://localhost:5000/", "/router/webuis/llama/"),
        ("llama", "/settings#top", "/router/webuis/llama/settings#top"),
        ("kobold-lcpp", "/lcpp/index.html", "/router/webuis/kobold-lcpp/index.html"),
        ("kobold-lcpp", "http://127.0.0.1:5000/v1/models", "/router/webuis/kobold-lcpp/v1/models"),
        ("llama", "relative/page", "relative/page"),  # already resolves under the prefix
        ("llama", "https://example.org/x", "https://example.org/x"),  # another origin
        ("llama", "http://127.0.0.1:5001/x", "http://127.0.0.1:5001/x"),  # not this backend
        ("llama", "//evil.example/x", "//evil.example/x"),
    ],
)
def test_redirects_stay_under_the_prefix(kind: str, location: str, expected: str) -> None:
    assert rewrite_location(location, BY_ID[kind], 5000) == expected


def test_the_listener_origin() -> None:
    assert Listener("127.0.0.1", 8081).origin("localhost", "127.0.0.1") == "http://localhost:8081"
    assert Listener("0.0.0.0", 8081).origin("192.168.1.5", "0.0.0.0") == "http://192.168.1.5:8081"
    # Bound elsewhere than the API: its own address, whatever name the browser used.
    assert Listener("127.0.0.1", 8081).origin("box.lan", "0.0.0.0") == "http://127.0.0.1:8081"
    assert Listener("::", 8081).origin("::1", "::") == "http://[::1]:8081"
    public = Listener("127.0.0.1", 8081, "https://ui.lan:8444")
    assert public.origin("localhost", "127.0.0.1") == "https://ui.lan:8444"


# ---- catalog ----------------------------------------------------------------------------------


def test_catalog_lists_only_kinds_with_a_compatible_configuration() -> None:
    configs = [
        config("chat", NATIVE, Lane.TEXT),
        config("ears", NATIVE, Lane.VOICE),
        config("kob", KOBOLD, Lane.TEXT, Lane.IMAGE),
    ]
    entries = catalog(configs, [], set(), Node("n1", None))
    assert [e["id"] for e in entries] == [
        "kobold-lite",
        "kobold-lcpp",
        "kobold-sd",
        "llama",
        "whispercpp",
    ]
    llama = next(e for e in entries if e["id"] == "llama")
    assert llama["enabled"] is False and llama["active"] is False
    assert llama["url"] == "/router/webuis/llama/" and llama["backend"] == "llamacpp"
    assert [m["model_id"] for m in llama["compatible_models"]] == ["chat"]
    assert llama["compatible_models"][0]["filename"] == "chat-text.gguf"
    sd = next(e for e in entries if e["id"] == "kobold-sd")
    assert sd["compatible_models"][0]["image_id"] == "kob-img"


def test_catalog_shows_the_enabled_flag_and_the_running_model() -> None:
    chat, other = config("chat", NATIVE, Lane.TEXT), config("other", NATIVE, Lane.TEXT)
    views = [view(chat, Family.LLAMACPP, Lane.TEXT)]
    (llama,) = catalog([chat, other], views, {"llama"}, Node("n1", "http://n1:8080"))
    assert llama["enabled"] is True and llama["active"] is True
    assert llama["active_model_id"] == "chat" and llama["node_url"] == "http://n1:8080"
    assert [(m["model_id"], m["active"]) for m in llama["compatible_models"]] == [
        ("chat", True),
        ("other", False),
    ]


def test_only_a_ready_runtime_that_is_not_draining_is_served() -> None:
    chat = config("chat", NATIVE, Lane.TEXT, Lane.EMBEDDINGS)
    text = view(chat, Family.LLAMACPP, Lane.TEXT)
    embed = view(chat, Family.LLAMACPP, Lane.EMBEDDINGS, key="chat@embeddings")
    assert serving(LLAMA, [embed, text]) == text  # the text runtime first
    assert serving(LLAMA, [embed]) == embed
    assert serving(LLAMA, [view(chat, Family.LLAMACPP, Lane.TEXT, draining=True)]) is None
    assert (
        serving(LLAMA, [view(chat, Family.LLAMACPP, Lane.TEXT, state=RuntimeState.LOADING)]) is None
    )
    # A KoboldCpp runtime serves its configuration's lanes from one process.
    kob = config("kob", KOBOLD, Lane.TEXT, Lane.VOICE)
    one = view(kob, Family.KOBOLD, Lane.TEXT, Lane.VOICE)
    assert serving(LITE, [one]) == one and serving(LLAMA, [one]) is None
    assert serving(WHISPER, [one]) is None


def test_the_refusal_names_what_to_load() -> None:
    configs = [config("ears", NATIVE, Lane.VOICE), config("chat", NATIVE, Lane.TEXT)]
    assert what_to_load(WHISPER, configs) == (
        "load one of: ears (POST /router/v1/site/webuis/load)"
    )


# ---- tickets and sessions ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_ticket_opens_its_kind_once_within_a_minute() -> None:
    clock = Clock()
    store = TokenStore(60, 8, single_use=True, clock=clock)
    token = store.issue("llama")
    assert store.check(token, "llama")
    assert not store.check(token, "llama")  # used
    late = store.issue("llama")
    clock.now += 60
    assert not store.check(late, "llama")  # expired
    other = store.issue("llama")
    assert not store.check(other, "sdcpp")  # another kind: refused, and spent
    assert not store.check(other, "llama")
    assert not store.check("", "llama") and not store.check(None, "llama")


def test_sessions_last_their_ttl_and_stay_with_their_kind() -> None:
    clock = Clock()
    store = TokenStore(900, 8, single_use=False, clock=clock)
    token = store.issue("llama")
    assert store.check(token, "llama") and store.check(token, "llama")
    assert not store.check(token, "whispercpp")
    clock.now += 899
    assert store.check(token, "llama")
    clock.now += 1
    assert not store.check(token, "llama")


def test_the_store_is_capped_oldest_first() -> None:
    store = TokenStore(60, 2, single_use=True, clock=Clock())
    first, second, third = (store.issue("llama") for _ in range(3))
    assert len(store) == 2
    assert not store.check(first, "llama")
    assert store.check(second, "llama") and store.check(third, "llama")
