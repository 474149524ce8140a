"""A page on another origin (another loopback port) calls the router with fetch() and a bearer
key, in Debian's chromium: it works when its origin is in `server.cors_origins`, the browser
blocks it when not (docs/security.md, "Browser origins")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.support.harness import RouterHarness, free_port
from tests.support.router_process import RouterProcess
from tests.ui.conftest import _require_chromium

KEY = "br0wser-cors-inference-5d1c"
ADMIN = "br0wser-cors-admin-a07e"
PAGE = b"<!doctype html><title>client</title><p>another origin</p>"

# What the page runs: a JSON chat completion with a bearer key (a preflighted request), and a
# model list; the result or the browser's error.
CALL = """async ([base, key]) => {
  try {
    const headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"};
    const body = JSON.stringify({model: "alpha", messages: [{role: "user", content: "hi"}]});
    const chat = await fetch(base + "/v1/chat/completions", {method: "POST", headers, body});
    const models = await fetch(base + "/v1/models", {headers: {"Authorization": "Bearer " + key}});
    return {chat: chat.status, reply: (await chat.json()).choices[0].message.content,
            models: (await models.json()).data.map(m => m.id)};
  } catch (e) {
    return {error: String(e)};
  }
}"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        pass


def page_server() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A router trusting one page origin, and two page servers: the trusted one and another."""
    _require_chromium()
    trusted, trusted_origin = page_server()
    other, other_origin = page_server()
    h = RouterHarness(tmp_path_factory.mktemp("cors-router"))
    h.model("alpha")
    process = RouterProcess(
        h,
        {"cors_origins": [trusted_origin]},
        extra={
            "security": {"profile": "secure"},
            "auth": {"inference_keys": [KEY], "admin_keys": [ADMIN]},
        },
    )
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API may own this thread's loop
        pool.submit(asyncio.run, process.start()).result()
    try:
        yield {"router": process.base, "trusted": trusted_origin, "other": other_origin}
    finally:
        process.kill()
        trusted.shutdown()
        other.shutdown()


def test_a_listed_origin_calls_the_router_with_a_bearer_key(
    page: Page, sites: dict[str, str]
) -> None:
    page.goto(sites["trusted"] + "/")
    result = page.evaluate(CALL, [sites["router"], KEY])
    assert result.get("chat") == 200, result
    assert result["reply"] and "alpha" in result["models"]


def test_an_unlisted_origin_is_blocked_by_the_browser(page: Page, sites: dict[str, str]) -> None:
    refused: list[str] = []
    page.on("requestfailed", lambda request: refused.append(request.url))
    page.goto(sites["other"] + "/")
    result = page.evaluate(CALL, [sites["router"], KEY])
    assert "error" in result and "Failed to fetch" in result["error"], result
    assert any("/v1/chat/completions" in url for url in refused)
