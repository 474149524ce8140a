"""A router whose models are real demo GGUFs (tests/ui/conftest.py's are empty files), so
GET /router/v1/status carries real estimates for the Overview's memory bars: a chat model on
the text lane and an embedding model on the embeddings lane, both on the host; a second chat
model for the eviction confirmation. The backends are the fake backend, as everywhere in
tests/ui."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from router.demo_models import write_bert_gguf, write_llama_gguf
from tests.support.harness import RouterHarness
from tests.support.router_process import RouterProcess
from tests.ui.conftest import GuardedPage, UiRouter, guarded, serving

CHAT, CHAT_B, EMBED, PINNED = "chat-a", "chat-b", "embed", "embed-pin"


def seed_demo_models(h: RouterHarness) -> None:
    h.model(CHAT, gpulayers=0)
    h.model(CHAT_B, gpulayers=0)
    h.model(EMBED, embeddingsmodel="embed.gguf", gpulayers=0)
    h.model(PINNED, embeddingsmodel=f"{PINNED}.gguf", gpulayers=0, router_pin=True)
    # The embedding model loads for 3 s: long enough to see its estimate while it loads.
    h.faults_for_model[EMBED] = "--startup-delay 3"
    write_llama_gguf(h.models_dir / f"{CHAT}.gguf", seed=1, name="chat a")
    write_llama_gguf(h.models_dir / f"{CHAT_B}.gguf", seed=2, name="chat b")
    write_bert_gguf(h.models_dir / "embed.gguf", seed=3)
    write_bert_gguf(h.models_dir / f"{PINNED}.gguf", seed=4)


def memory_router(tmp: Path, memory: dict[str, Any], **runtime: object) -> Iterator[UiRouter]:
    h = RouterHarness(tmp)
    seed_demo_models(h)
    process = RouterProcess(h, extra={"memory": memory}, **runtime)
    with serving(process, h) as router:
        yield router


@pytest.fixture(scope="module")
def bars_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiRouter]:
    """A 128 MiB host budget: two ~30 MiB runtimes fill a visible part of the bar."""
    yield from memory_router(tmp_path_factory.mktemp("ui-memory"), {"host_budget": "128MiB"})


@pytest.fixture
def bars_ui(page: Page, bars_router: UiRouter, tmp_path: Path) -> Iterator[GuardedPage]:
    yield from guarded(page, bars_router, tmp_path)


@pytest.fixture(scope="module")
def tight_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiRouter]:
    """A 48 MiB host budget under `runtime.residency: memory`: the ~30 MiB chat model and the
    ~26 MiB embedding model fit one at a time, so loading one evicts the other (different
    lanes: a memory eviction, not the lane's own swap)."""
    tmp = tmp_path_factory.mktemp("ui-evict")
    yield from memory_router(tmp, {"host_budget": "48MiB"}, residency="memory")


@pytest.fixture
def tight_ui(page: Page, tight_router: UiRouter, tmp_path: Path) -> Iterator[GuardedPage]:
    yield from guarded(page, tight_router, tmp_path)
