"""A second real router for the data pages (analytics, load captures, load errors), over a
store seeded with known rows through the real Store (its migrations, its capture cap, its
sanitising), then served by a real `tensor-router start` with load capture on.

Test modules bind the fixtures by assignment (`data_ui = data_router.data_ui`), so pytest
finds them without a second conftest.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import Page

from router.config import AnalyticsSection
from router.store import Store
from router.store.rows import COLUMNS, INSERT_EVENT
from tests.support.harness import RouterHarness
from tests.support.router_process import RouterProcess
from tests.ui.conftest import GuardedPage, UiRouter, _require_chromium

NODE = "ui-data-node"
HOUR = 3600.0
DAY = 86400.0
# A line a hostile backend could print: it must reach the screen as these characters.
XSS_LINE = "<img src=x onerror=\"document.title='pwned'\">"
PAGED_LINES = 260  # more than one output page (200 chunks)
EXTRA_CAPTURES = 52  # with the two below: more than one list page (50)


def _event(
    at: float,
    model: str,
    lane: str,
    status: int,
    duration_ms: float,
    queue_ms: float,
    tokens: tuple[int, int] | None,
    key: str | None = None,
) -> tuple[Any, ...]:
    """One analytics_events row in rows.py's COLUMNS order (a column added later stays NULL)."""
    prompt, completion = tokens or (None, None)
    values = {
        "time": at,
        "route": f"/v1/{'images/generations' if lane == 'image' else 'chat/completions'}",
        "surface": "openai",
        "lane": lane,
        "model": model,
        "node_id": NODE,
        "backend": "llamacpp",
        "status": status,
        "upstream_status": status if status != 499 else None,
        "error_message": "backend said no" if status >= 500 else None,
        "queue_wait_ms": queue_ms,
        "ttfb_ms": duration_ms / 2,
        "duration_ms": duration_ms,
        "bytes_in": 100,
        "bytes_out": 200,
        "aborted": 1 if status == 499 else 0,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": None if tokens is None else sum(tokens),
        "key_name": key,
    }
    return tuple(values.get(column) for column in COLUMNS)


def analytics_rows(now: float) -> list[tuple[Any, ...]]:
    """Known traffic: three models on two lanes, spread over the month (so every range differs).

    Inserted with rows.py's INSERT_EVENT; a 499 is marked aborted as row_from_raw marks it.
    """
    rows = []
    for i in range(12):  # the last hour: alpha, ten fine, two failed; sent by scoped keys
        status = 500 if i in (3, 7) else 200
        key = "nightly" if i % 2 else "alice"
        at, ms = now - 60 * (i + 1), 100.0 + 10 * i
        rows.append(_event(at, "alpha", "text", status, ms, 5.0 * i, (10, 20), key))
    for i in range(5):  # the last hour: beta, one aborted by its client
        rows.append(
            _event(
                now - 90 * (i + 1), "beta", "text", 499 if i == 0 else 200, 40.0 + i, 1.0, (3, 4)
            )
        )
    for i in range(4):  # hours ago: an image model, no tokens
        rows.append(_event(now - HOUR * (3 + i), "artist", "image", 200, 2000.0 + i, 50.0, None))
    for i in range(6):  # days ago and weeks ago: only in 7d and 30d
        rows.append(_event(now - DAY * (2 + i), "alpha", "text", 200, 300.0, 2.0, (1, 1)))
        rows.append(_event(now - DAY * (12 + i), "beta", "text", 502, 80.0, 0.0, (1, 0)))
    return rows


async def _capture(
    store: Store,
    *,
    model: str,
    started: float,
    status: str,
    exit_code: int | None,
    lines: list[tuple[str, bytes]],
    error: str | None = None,
    readahead: dict[str, Any] | None = None,
) -> str:
    attempt = store.load_attempts.start(
        model=model,
        backend="llamacpp",
        kind="load",
        lane="text",
        started_at=started,
        kcpps={
            "model_param": f"/home/op/models/{model}.gguf",
            "contextsize": 4096,
            "password": "hunter2",
        },
        asset_hashes={f"/home/op/models/{model}.gguf": "ab" * 32},
        argv=["llama-server", "-m", f"/home/op/models/{model}.gguf", "--api-key", "sk-secret"],
        readahead=readahead,
    )
    for stream, line in lines:
        store.load_attempts.output(attempt, stream, line + b"\n")
    store.load_attempts.finish(attempt, status, exit_code, error, ended_at=started + 2.5)
    return attempt


async def _seed_store(path: Path, cap_mb: float, fill: Any) -> Any:
    store = await Store.open(
        path,
        node_id=NODE,
        analytics=AnalyticsSection(
            load_capture_enabled=True, load_capture_max_output_mb=cap_mb, writer_process=False
        ),
    )
    try:
        result = await fill(store)
        await store.flush()
        return result
    finally:
        await store.close()


def console_lines() -> list[tuple[str, bytes]]:
    lines = [
        ("stdout", b"\x1b[32mloading model\x1b[0m plain after"),
        ("stderr", b"warning: \x1b[1;31mlow memory\x1b[0m"),
        ("stdout", XSS_LINE.encode()),
    ]
    for i in range(PAGED_LINES - len(lines) - 1):
        lines.append(("stderr" if i % 10 == 9 else "stdout", f"line {i:03d}".encode()))
    lines.append(("stdout", b"model ready"))
    return lines


def run_async(coro: Any) -> Any:
    """asyncio.run on a thread of its own: Playwright's sync API keeps a loop on this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


# What the read-ahead had done when the "paged" capture's load began (docs/swaps.md).
READAHEAD = {
    "bytes": 270999680,
    "seconds": 0.461,
    "done": True,
    "result": "done",
    "planned": 270999680,
    "total": 270999680,
    "capped": False,
}


def seed(path: Path, now: float) -> dict[str, Any]:
    """Every row the data-page tests know about; returns the ids they look for."""

    async def roomy(store: Store) -> dict[str, Any]:
        for i in range(EXTRA_CAPTURES):
            await _capture(
                store,
                model=f"old-{i:02d}",
                started=now - DAY - 60 * i,
                status="ok",
                exit_code=None,
                lines=[("stdout", b"ok")],
            )
        paged = await _capture(
            store,
            model="alpha",
            started=now - 600,
            status="ok",
            exit_code=None,
            lines=console_lines(),
            readahead=READAHEAD,
        )
        store.load_errors.record(
            {
                "time": now - 300,
                "model": "beta",
                "backend": "llamacpp",
                "reason": "the backend exited with code 9 while serving",
            }
        )
        store.load_errors.record(
            {
                "time": now - 200,
                "model": "artist",
                "backend": "sdcpp",
                "reason": "no progress for 10s",
                "exit_code": None,
            }
        )
        return {"paged": paged}

    async def tight(store: Store) -> str:
        # A cap of about 1 KiB: the 40 lines below pass it, so the capture is truncated.
        lines = [("stderr", f"error {i:02d}: out of memory, retrying".encode()) for i in range(40)]
        attempt = await _capture(
            store,
            model="beta",
            started=now - 400,
            status="failed",
            exit_code=3,
            lines=lines,
            error="exited with code 3",
        )
        store.load_errors.record(
            {
                "time": now - 100,
                "model": "beta",
                "backend": "llamacpp",
                "reason": "the backend exited with code 3 during the load",
                "exit_code": 3,
                "output_tail": ["error 38", "error 39"],
                "attempt_id": attempt,
            }
        )
        return attempt

    ids = run_async(_seed_store(path, 1.0, roomy))
    ids["truncated"] = run_async(_seed_store(path, 0.001, tight))
    with sqlite3.connect(path) as db:
        db.executemany(INSERT_EVENT, analytics_rows(now))
    return ids


SHELL_CALLS = {"/router/v1/ui/session", "/router/v1/events"}


def page_calls(ui: GuardedPage) -> list[tuple[str, str]]:
    """The API calls the page made, without the shell's own (session, event stream)."""
    return [call for call in ui.calls() if call[1] not in SHELL_CALLS]


def serious(results: Any) -> list[str]:
    """axe's serious and critical violations, one line each (for an assert message)."""
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


class DataRouter(UiRouter):
    ids: dict[str, Any]
    now: float

    def output_page(self, attempt: str, after: int = 0) -> dict[str, Any]:
        page: dict[str, Any] = self.get(
            f"/router/v1/site/load-captures/{attempt}/output", params={"after_sequence": after}
        )
        return page

    @staticmethod
    def text_of(chunk: dict[str, Any]) -> str:
        return base64.b64decode(chunk["data"]).decode()


@pytest.fixture(scope="session")
def data_ui_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataRouter]:
    _require_chromium()
    h = RouterHarness(tmp_path_factory.mktemp("ui-data-router"))
    for model_id in ("alpha", "beta"):
        h.model(model_id)
    process = RouterProcess(h, load_timeout=20)
    config = yaml.safe_load(process.config.read_text())
    db_path = Path(config["analytics"]["database_path"])
    config["analytics"].update(load_capture_enabled=True, writer_process=False)
    config["cluster"] = {"node_id": NODE}
    config["downloads"] = {"enabled": False}  # the Download page's "off" state (never the network)
    process.config.write_text(yaml.safe_dump(config))
    now = time.time()
    ids = seed(db_path, now)
    run_async(process.start())
    router = DataRouter(process, h)
    router.ids, router.now = ids, now
    try:
        yield router
    finally:
        router.http.close()
        process.kill()


@pytest.fixture
def data_ui(data_ui_router: DataRouter, page: Page, tmp_path: Path) -> Iterator[GuardedPage]:
    page.set_default_timeout(15_000)
    guarded = GuardedPage(page, data_ui_router, tmp_path)
    yield guarded
    guarded.check()
