"""Issue 26 on the Overview: the lane's queue with positions and ETAs, next to the load
progress, live from `queue_position` events (the router's queue checked over HTTP too)."""

from __future__ import annotations

import threading

import httpx
from playwright.sync_api import expect

from tests.ui.conftest import GuardedPage
from tests.ui.test_overview import lane_row


def _chat_in_background(base: str, model: str) -> threading.Thread:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    def send() -> None:
        with httpx.Client(base_url=base, timeout=60) as client:
            client.post("/v1/chat/completions", json=body)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_requests_waiting_behind_a_load_show_their_position_and_eta(ui: GuardedPage) -> None:
    ui.goto("/router/ui/overview")
    expect(ui.page.locator("#connection")).to_have_text("connected")
    expect(lane_row(ui, "text")).to_contain_text("empty")
    threads = [_chat_in_background(ui.router.base, "slowpoke") for _ in range(2)]  # a 4 s load
    row = lane_row(ui, "text")
    queue = row.get_by_role("list", name="Waiting for the text lane")
    expect(row.get_by_role("progressbar", name="Loading slowpoke")).to_be_visible(timeout=5_000)
    expect(queue.get_by_role("listitem")).to_have_count(2, timeout=5_000)
    items = queue.get_by_role("listitem")
    expect(items.nth(0)).to_contain_text("1. slowpoke · waiting")
    expect(items.nth(1)).to_contain_text("2. slowpoke")
    expect(items.nth(0)).to_contain_text("ETA")  # a number once measured, else "ETA unknown"
    status = ui.router.get("/router/v1/status")["queue"]["text"]
    assert [r["position"] for r in status] == [1, 2], status
    ui.shot("overview-queue")
    expect(row).to_contain_text("ready", timeout=20_000)
    expect(queue).to_have_count(0)  # granted: the list is gone
    for thread in threads:
        thread.join(30)
