"""Browser tests of the admin WebUI: Debian's chromium driven by Playwright for Python.

One real router subprocess per session (tests/support/router_process.py) with fake backends and a
seeded store serves every test; each test gets a fresh browser context and the `ui` fixture,
a guarded page that fails the test on a console error, a page error, a CSP violation, a
request to another origin, an unexpected 4xx/5xx answer or an API path that doubles a base
path. Tests reset the router's runtimes first (`ui.router.reset()`), so they do not depend on
their order. Never `playwright install`: `make browser` installs chromium from Debian.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from playwright.sync_api import ConsoleMessage, Page, Request, Response, expect

from tests.support.harness import RouterHarness, wait_until
from tests.support.router_process import RouterProcess
from tests.ui.lending_cluster import GUARDIANS, TEXT_LINKS, LendingCluster, build

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BULK_MODELS = 200
ADMIN_KEY = "adm-ui-5c1e9f3a7b2d4e60"
INFERENCE_KEY = "inf-ui-0a8b7c6d5e4f3a21"
# Switches per model for the fake backend (see tests/fakes/fake_backend.py).
FAULTS = {
    "crashy": "--exit-at-start 3",
    "slowpoke": "--startup-delay 4 --progress-every 0.2",
}
DOUBLED = re.compile(r"/router/(v1|ui)/.*/router/(v1|ui)/|/router/v1/router/|/router/ui/router/ui")

expect.set_options(timeout=15_000)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the browser tests `ui` and run them last: Playwright's sync API keeps an event loop
    running in the main thread once it started, which no asyncio test after it survives."""
    here = Path(__file__).parent
    browser = [item for item in items if here in Path(str(item.fspath)).parents]
    for item in browser:
        item.add_marker(pytest.mark.ui)
    chosen = set(map(id, browser))
    items[:] = [item for item in items if id(item) not in chosen] + browser


def _require_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium "
            "fonts-dejavu-core); never `playwright install`"
        )


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    _require_chromium()
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "args": LAUNCH_ARGS}


class UiRouter:
    """The router the browser talks to, plus an httpx client to check what it says."""

    def __init__(self, process: RouterProcess, harness: RouterHarness) -> None:
        self.process = process
        self.harness = harness
        self.base = process.base
        self.http = httpx.Client(base_url=process.base, timeout=30)

    def get(self, path: str, **kw: Any) -> Any:
        response = self.http.get(path, **kw)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.http.post(path, json=body or {})
        response.raise_for_status()
        return response.json()

    def reset(self) -> None:
        """Every runtime stopped and every model enabled: the state each test starts from."""
        self.post("/router/v1/unload", {"target": "all"})
        for model_id in self.get("/router/v1/site/models/state")["disabled"]:
            self.post("/router/v1/site/models/state", {"local_id": model_id, "enabled": True})
        wait_until(lambda: not self.get("/router/v1/status")["runtimes"], "runtimes stopped")

    def runtime_states(self) -> dict[str, str]:
        return {r["model"]: r["state"] for r in self.get("/router/v1/status")["runtimes"]}

    def openai_ids(self) -> set[str]:
        return {m["id"] for m in self.get("/v1/models")["data"]}


def seed_models(h: RouterHarness) -> None:
    for model_id in ("alpha", "beta", "chat-q4", "chat-q10", "chat-q2", *FAULTS):
        h.model(model_id)
    for i in range(BULK_MODELS - 7):
        h.model(f"bulk-{i:03d}")
    h.faults_for_model.update(FAULTS)


@contextmanager
def serving(process: RouterProcess, h: RouterHarness) -> Iterator[UiRouter]:
    """`process` started from its own thread (Playwright's sync API may already run an event
    loop in this one), killed after."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, process.start()).result()
    router = UiRouter(process, h)
    try:
        yield router
    finally:
        router.http.close()
        process.kill()


@pytest.fixture(scope="session")
def ui_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiRouter]:
    _require_chromium()
    h = RouterHarness(tmp_path_factory.mktemp("ui-router"))
    seed_models(h)
    with serving(RouterProcess(h, load_timeout=20, no_progress_timeout=10), h) as router:
        yield router


def secure(process: RouterProcess) -> RouterProcess:
    """The router's config in the secure profile with the keys below (before it starts)."""
    config = yaml.safe_load(process.config.read_text())
    config["security"] = {"profile": "secure"}
    config["auth"] = {"admin_keys": [ADMIN_KEY], "inference_keys": [INFERENCE_KEY]}
    process.config.write_text(yaml.safe_dump(config))
    return process


@pytest.fixture(scope="session")
def secure_router(
    ui_router: UiRouter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiRouter]:
    """A second router in the secure profile (after ui_router: chromium is checked there)."""
    h = RouterHarness(tmp_path_factory.mktemp("ui-secure"))
    h.model("alpha")
    with serving(secure(RouterProcess(h)), h) as router:
        yield router


class GuardedPage:
    """A page whose every problem is recorded; `check()` fails the test when there was one."""

    def __init__(self, page: Page, router: UiRouter, shots: Path) -> None:
        self.page = page
        self.router = router
        self.shots = shots
        self.origin = router.base
        self.problems: list[str] = []
        self.api_calls: list[tuple[str, str]] = []
        self.allowed: list[tuple[re.Pattern[str], int]] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        page.on("request", self._request)
        page.on("response", self._response)
        # Reported as a console error, which _console turns into a problem.
        page.add_init_script(
            "document.addEventListener('securitypolicyviolation', (e) => console.error("
            "'CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI));"
        )

    def allow(self, path_pattern: str, status: int) -> None:
        """A 4xx/5xx this test expects (e.g. a refused edit)."""
        self.allowed.append((re.compile(path_pattern), status))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            text = message.text
            # Chromium logs every failed fetch; the answer itself is judged in _response.
            if text.startswith("Failed to load resource: the server responded with a status"):
                return
            # EventSource reconnects while the test took the network away.
            if "net::ERR_INTERNET_DISCONNECTED" in text:
                return
            self.problems.append(f"console error: {text}")

    def _request(self, request: Request) -> None:
        url = request.url
        if url.startswith("data:"):
            return
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != self.origin:
            self.problems.append(f"request to another origin: {url}")
        if DOUBLED.search(parts.path):
            self.problems.append(f"doubled base path: {parts.path}")
        if parts.path.startswith("/router/v1/"):
            self.api_calls.append((request.method, parts.path))

    def _response(self, response: Response) -> None:
        if response.status < 400:
            return
        path = urlsplit(response.url).path
        if any(p.search(path) and s == response.status for p, s in self.allowed):
            return
        self.problems.append(f"unexpected {response.status} for {response.request.method} {path}")

    def goto(self, path: str) -> None:
        self.page.goto(self.origin + path)

    def calls(self, prefix: str = "/router/v1/") -> list[tuple[str, str]]:
        return [c for c in self.api_calls if c[1].startswith(prefix)]

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def check(self) -> None:
        assert not self.problems, "the page misbehaved:\n" + "\n".join(self.problems[:20])


@pytest.fixture
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1280, "height": 800}}


def guarded(page: Page, router: UiRouter, tmp_path: Path) -> Iterator[GuardedPage]:
    """The body of a `ui`-like fixture over any router: reset first, checked after."""
    page.set_default_timeout(15_000)
    router.reset()
    guarded = GuardedPage(page, router, tmp_path)
    yield guarded
    guarded.check()


@pytest.fixture
def ui(page: Page, ui_router: UiRouter, tmp_path: Path) -> Iterator[GuardedPage]:
    yield from guarded(page, ui_router, tmp_path)


@pytest.fixture(scope="module")
def lending(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LendingCluster]:
    # Not the tmp_harness fixture (tests/conftest.py): its no-survivor check would count the session's
    # browser processes; each router here is killed at the end and its backends with it.
    h = RouterHarness(tmp_path_factory.mktemp("lending-ui"))
    h.routers = []  # type: ignore[attr-defined]
    master, slave = build(h)

    async def up() -> None:
        await master.start()
        await slave.start()

    # Its own thread: Playwright's sync API may already run an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, up()).result()
    db = h.tmp / "data-master" / "router.sqlite"
    c = LendingCluster(master, slave, httpx.Client(base_url=master.base, timeout=30), db)
    try:
        wait_until(
            lambda: (
                any(
                    x["node_id"] == "s1"
                    for x in c.get(TEXT_LINKS, node_id="m", model_id="slow")["candidates"]
                )
                and any(g["node_id"] == "s1" for g in c.get(GUARDIANS)["candidates"])
            ),
            "the slave's models on the master",
            seconds=45.0,
        )
        yield c
    finally:
        c.http.close()
        for node in (master, slave):
            node.kill()


@pytest.fixture
def lending_ui(lending: LendingCluster, page: Page, tmp_path: Path) -> Iterator[GuardedPage]:
    """The Lending page's tests: a page on the lending cluster's master, reset before and after."""
    lending.reset()
    guarded = GuardedPage(page, UiRouter(lending.master, lending.master.h), tmp_path)
    yield guarded
    guarded.check()
    lending.reset()
