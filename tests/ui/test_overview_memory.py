"""The Overview's memory bars (issue 25): each device a bar split by runtime, an estimate
hatched and a measured figure solid, a legend, the free space; live as runtimes load, are
measured and unload. Two runtimes of different lanes (a chat model and an embedding model,
real demo GGUFs, the fake backend) are resident at once; the router measures each backend
process after its load (docs/residency.md), so a loading runtime shows its estimate and a
loaded one, soon after, its measured figure."""

from __future__ import annotations

import threading

from playwright.sync_api import Locator, expect

from tests.ui.conftest import GuardedPage, UiRouter, wait_until
from tests.ui.memory_router import CHAT, EMBED, bars_router, bars_ui

__all__ = ["bars_router", "bars_ui"]  # fixtures


def sources(router: UiRouter) -> dict[str, str]:
    return {
        rt["model"]: rt["memory"]["source"] for rt in router.get("/router/v1/status")["runtimes"]
    }


def expect_segment(host: Locator, key: str, source: str) -> None:
    seg = host.locator(f'g.mem-seg[data-runtime="{key}"]')
    expect(seg).to_have_attribute("data-source", source)
    if source == "measured":  # solid: the colour rect alone
        expect(seg.locator("rect")).to_have_count(1)
    else:  # an estimate: the colour rect and the hatch over it
        expect(seg.locator("rect")).to_have_count(2)
        expect(seg.locator("rect").nth(1)).to_have_attribute("fill", "url(#mem-hatch-0)")


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
    ui.router.post("/router/v1/load", {"model": CHAT})  # over the API: the page sees the stream
    segments = host.locator("g.mem-seg")
    expect(segments).to_have_count(1)

    # The embedding model loads for 3 s: its estimate shows, hatched, while it loads.
    loading = threading.Thread(
        target=lambda: ui.router.post("/router/v1/load", {"model": EMBED}), daemon=True
    )
    loading.start()
    expect(segments).to_have_count(2)
    keys = {rt["model"]: rt["runtime"] for rt in ui.router.get("/router/v1/status")["runtimes"]}
    assert sources(ui.router)[EMBED] == "estimate"
    expect_segment(host, keys[EMBED], "estimate")
    loading.join(30)

    # Both measured after their loads: the bars turn solid without a reload of the page.
    wait_until(lambda: set(sources(ui.router).values()) == {"measured"}, "both measured")
    for key in keys.values():
        expect_segment(host, key, "measured")
    status = ui.router.get("/router/v1/status")
    (row,) = [d for d in status["devices"] if d["device"] == "host"]
    expect(host.locator("rect.mem-free")).to_have_attribute("data-free", str(row["free"]))
    legend = ui.page.get_by_role("list", name="What holds host")
    expect(legend.locator("li")).to_have_count(3)  # two runtimes and the free space
    expect(legend).to_contain_text(f"{CHAT} (text):")
    expect(legend).to_contain_text(f"{EMBED} (embeddings):")
    expect(legend.locator(f'li[data-runtime="{keys[CHAT]}"]')).to_contain_text("measured")
    expect(legend.locator("li.mem-free-item")).to_contain_text("free:")
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
    expect(segments.first).to_have_attribute("data-runtime", keys[CHAT])
    expect(legend).not_to_contain_text(EMBED)
    expect(legend).to_contain_text(CHAT)
