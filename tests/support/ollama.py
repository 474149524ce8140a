"""The official `ollama` client on a started router (tests/ollama/)."""

from __future__ import annotations

import ollama

from tests.support.harness import RouterHarness


def client_for(h: RouterHarness) -> ollama.AsyncClient:
    assert h.server is not None
    return ollama.AsyncClient(host=str(h.server.make_url("")).rstrip("/"))
