"""P-UI: the Overview's time to first meaningful render, navigation to the runtime table filled.

A real router (trusted_lan) serves one loaded model on the instant upstream; headless Debian
chromium (no `playwright install`) opens /router/ui/overview in a fresh page each time. Reported:
the median and worst of `reps x 5` loads, from `page.goto` to the text lane's row naming the
model, and the browser's own DOMContentLoaded time, so a reader can tell network and script
time from the API calls the page waits on.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import common as c

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def measure(url: str, loads: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    first_render, dom_ready = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        for i in range(loads + 2):  # two warm-up loads: the first fills the browser cache
            page = context.new_page()
            started = time.perf_counter()
            page.goto(url + "/router/ui/overview")
            page.locator("main table tbody tr", has_text="fast").first.wait_for(timeout=30_000)
            elapsed = (time.perf_counter() - started) * 1000
            dom = page.evaluate(
                "performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"
            )
            page.close()
            if i >= 2:
                first_render.append(elapsed)
                dom_ready.append(float(dom))
        browser.close()
    return {
        "loads": loads,
        "first_render_ms_p50": round(statistics.median(first_render), 1),
        "first_render_ms_max": round(max(first_render), 1),
        "dom_content_loaded_ms_p50": round(statistics.median(dom_ready), 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    with c.workdir("ui-render") as wd, c.Stack() as stack:
        model = wd / "fast.gguf"
        model.write_bytes(b"GGUF-bench")
        router = c.Router(wd / "router", {"fast": model}, c.write_wrapper(wd / "up", "stream"))
        stack.callback(router.stop)
        router.start()
        router.load("fast")
        data = measure(router.url, opts.reps * 5)
    c.log(f"ui_render: {data}")
    c.save(opts, "ui_render", data)
    return data


if __name__ == "__main__":
    main()
