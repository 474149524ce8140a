"""The default embedding backend (router/runtime/default_embedding.py): which loaded runtime
takes a selectorless embeddings request when no embedding configuration is loaded. Pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from router.config import ModelConfig
from router.domain import BackendMode, Lane
from router.runtime import RuntimeState, RuntimeView
from router.runtime.default_embedding import (
    may_pass_through,
    no_embedding_model,
    passthrough_views,
)
from tests.support.views import runtime_view

EMBED = "/v1/embeddings"


def config(name: str, mode: BackendMode, lanes: frozenset[Lane]) -> ModelConfig:
    return ModelConfig(
        id=name,
        path=Path(f"/models/{name}.kcpps"),
        raw={},
        backend_mode=mode,
        components={},
        lanes=lanes,
        image_id=None,
    )


def view(cfg: ModelConfig, lane: Lane = Lane.TEXT, **fields: Any) -> RuntimeView:
    return runtime_view(cfg, lane, **fields)


TEXT = frozenset({Lane.TEXT})


def test_a_loaded_vllm_text_runtime_is_the_default() -> None:
    pooled = config("bge", BackendMode.VLLM, TEXT)
    assert passthrough_views([view(pooled)], EMBED, "POST") == [view(pooled)]
    # Every embedding route vLLM implements; never KoboldCpp's own.
    for path in ("/v2/embed", "/pooling", "/v1/rerank", "/score"):
        assert may_pass_through(TEXT, BackendMode.VLLM, Lane.TEXT, path, "POST")
    assert not may_pass_through(TEXT, BackendMode.VLLM, Lane.TEXT, "/api/extra/embeddings", "POST")


def test_llama_server_and_koboldcpp_text_runtimes_never_are() -> None:
    """They cannot answer embeddings for their text model as the router starts them."""
    for mode in (BackendMode.LLAMA_SDCPP, BackendMode.KOBOLD):
        loaded = view(config("chat", mode, TEXT))
        assert passthrough_views([loaded], EMBED, "POST") == []


def test_a_configuration_with_an_embedding_component_never_is() -> None:
    """Its embeddings come from its own embedding runtime: not loaded means not served."""
    both = config("both", BackendMode.VLLM, frozenset({Lane.TEXT, Lane.EMBEDDINGS}))
    assert passthrough_views([view(both)], EMBED, "POST") == []


def test_only_a_ready_runtime_taking_new_work() -> None:
    pooled = config("bge", BackendMode.VLLM, TEXT)
    for state in (RuntimeState.LOADING, RuntimeState.STOPPING, RuntimeState.FAILED):
        assert passthrough_views([view(pooled, state=state)], EMBED, "POST") == []
    assert passthrough_views([view(pooled, draining=True)], EMBED, "POST") == []


def test_a_voice_runtime_is_not_a_text_model() -> None:
    whisper = config("whisper", BackendMode.VLLM, frozenset({Lane.VOICE}))
    assert passthrough_views([view(whisper, Lane.VOICE)], EMBED, "POST") == []


@given(st.permutations(["c", "a", "b"]))
def test_the_order_is_the_configurations(names: list[str]) -> None:
    views = [view(config(n, BackendMode.VLLM, TEXT)) for n in names]
    assert [v.config.id for v in passthrough_views(views, EMBED, "POST")] == ["a", "b", "c"]


def test_the_refusal_names_each_embedding_model_once() -> None:
    err = no_embedding_model(["emb-b", "emb-a", "emb-b"])
    assert err.status == 400
    assert err.message.endswith("embedding models: emb-a, emb-b")
    assert "no embedding model is loaded" in err.message
    assert no_embedding_model([]).message.endswith("(none configured)")
