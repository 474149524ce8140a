"""The Overview's memory bars (issue 25): each device a bar split by runtime, an estimate
hatched, a legend, the free space; live as runtimes load and unload. Two runtimes of different
lanes (a chat model and an embedding model, real demo GGUFs) are resident at once."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.ui.conftest import GuardedPage
from tests.ui.memory_router import CHAT, EMBED, bars_router, bars_ui

__all__ = ["bars_router", "bars_ui"]  # fixtures


def test_two_resident_runtimes_split_the_host_bar_and_follow_loads_live(
    bars_ui: GuardedPage,
) -> None:
    ui = bars_ui
    ui.goto("/router/ui/overview")
    expect(ui.page.locator("#connection")).to_have_text("connected")
    host = ui.page.locator('svg.mem-bar[data-device="host"]')
    expect(host).to_have_attribute(
        "aria-label", "host memory: 0 B used of a 128.0 MiB budget, 128.0 MiB free"
    )
    for model in (CHAT, EMBED):  # loaded over the API: the page learns it from the stream
        ui.router.post("/router/v1/load", {"model": model})
    segments = host.locator("g.mem-seg")
    expect(segments).to_have_count(2)
    status = ui.router.get("/router/v1/status")
    held = {rt["runtime"]: rt["memory"] for rt in status["runtimes"]}
    assert {m["source"] for m in held.values()} == {"estimate"}
    for key in held:
        seg = host.locator(f'g.mem-seg[data-runtime="{key}"]')
        expect(seg).to_have_attribute("data-source", "estimate")
        # An estimate: the colour rect and the hatch over it.
        expect(seg.locator("rect")).to_have_count(2)
        expect(seg.locator("rect").nth(1)).to_have_attribute("fill", "url(#mem-hatch-0)")
    (row,) = [d for d in status["devices"] if d["device"] == "host"]
    legend = ui.page.get_by_role("list", name="What holds host")
    expect(legend.locator("li")).to_have_count(3)  # two runtimes and the free space
    expect(legend).to_contain_text(f"{CHAT} (text):")
    expect(legend).to_contain_text(f"{EMBED} (embeddings):")
    expect(legend.locator("li.mem-free-item")).to_contain_text("free:")
    free = host.locator("rect.mem-free")
    expect(free).to_have_attribute("data-free", str(row["free"]))
    widths = [
        float(w)
        for w in host.locator("g.mem-seg rect:first-child").evaluate_all(
            "(rs) => rs.map((r) => r.getAttribute('width'))"
        )
    ]
    assert all(w > 0 for w in widths) and sum(widths) < 640
    ui.shot("overview-memory")

    ui.router.post("/router/v1/unload", {"target": "embeddings"})
    expect(segments).to_have_count(1)
    (chat,) = [rt["runtime"] for rt in status["runtimes"] if rt["model"] == CHAT]
    expect(segments.first).to_have_attribute("data-runtime", chat)
    expect(legend).not_to_contain_text(EMBED)
    expect(legend).to_contain_text(CHAT)
