"""Site store routes (router/api/site/store.py) on a small app that mounts them at their paths."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from router.api.site.store import HANDLERS, parse_time
from router.app import dispatcher
from router.appkeys import CLUSTER, STORE
from router.cluster import AllowList, ClusterService, NodeClient
from router.config.schema import ClusterSection
from router.domain import Surface
from router.errors import BadRequest, RouterError, render
from router.store import Store
from tests.support.harness import raw_record
from tests.support.store import store_at

SITE = "/router/v1/site"
ClientFactory = Callable[[web.Application], Awaitable[TestClient]]


@web.middleware
async def render_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except RouterError as err:
        return render(err, Surface.SITE)


def build_app(store: Store) -> web.Application:
    """The site store handlers behind app.py's own dispatcher (the route table's
    classification, then the node a call names), on a standalone node `n1`."""
    app = web.Application(middlewares=[render_errors])
    app[STORE] = store
    client = NodeClient(None, "", AllowList([]), 10.0)  # type: ignore[arg-type]  # never called
    app[CLUSTER] = ClusterService(ClusterSection(node_id="n1"), client, tuple, lambda _: None)
    dispatch = dispatcher(HANDLERS)
    app.router.add_route("*", SITE + "/{tail:.*}", dispatch)
    return app


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with store_at(tmp_path, flush_interval=3600, load_capture_enabled=True) as store:
        yield store


@pytest.fixture
async def client(store: Store, aiohttp_client: ClientFactory) -> TestClient:
    return await aiohttp_client(build_app(store))


def test_handler_table_names_every_store_route() -> None:
    assert set(HANDLERS) >= {
        "site.analytics",
        "site.analytics_flush",
        "site.load_captures",
        "site.load_capture",
        "site.load_capture_output",
        "site.load_errors",
        "site.store_download",
    }


def test_times_are_unix_seconds_or_iso() -> None:
    assert parse_time("1700000000", "from") == 1_700_000_000.0
    assert parse_time("2023-11-14T22:13:20Z", "from") == 1_700_000_000.0
    assert parse_time("2023-11-14T22:13:20", "from") == 1_700_000_000.0  # naive = UTC
    with pytest.raises(BadRequest):
        parse_time("yesterday", "from")


async def test_analytics_summary_and_filters(store: Store, client: TestClient) -> None:
    store.record_raw(raw_record(wall=1_700_000_100, route="/v1/completions", model="a"))
    store.record_raw(raw_record(wall=1_700_000_200, route="/v1/completions", model="b", status=500))
    resp = await client.get(
        f"{SITE}/analytics",
        params={"from": "2023-11-14T22:13:20Z", "to": "1700003600", "node": "n1"},
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["nodes"] == ["n1"] and body["totals"]["requests"] == 2
    assert body["totals"]["errors"] == 1
    resp = await client.get(
        f"{SITE}/analytics", params={"from": "1700000000", "to": "1700003600", "model": "a"}
    )
    assert (await resp.json())["totals"]["requests"] == 1
    for params, status in (
        ({"from": "soon"}, 400),
        ({"from": "1700003600", "to": "1700000000"}, 400),
        ({"bucket_seconds": "1"}, 400),
        ({"node": "other"}, 404),
    ):
        resp = await client.get(f"{SITE}/analytics", params=params)
        assert resp.status == status, params
        assert "error" in await resp.json()


async def test_flush_reports_this_node_as_persisted(store: Store, client: TestClient) -> None:
    store.record_raw(raw_record(route="/v1/completions"))
    resp = await client.post(f"{SITE}/analytics/flush")
    assert await resp.json() == {"persisted": ["n1"], "failed": []}
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT COUNT(*) FROM analytics_events").fetchone()[0] == 1


async def test_load_captures_list_detail_and_output(store: Store, client: TestClient) -> None:
    attempt = store.load_attempts.start(
        model="m", backend="llamacpp", kcpps={"password": "x", "model": "/m/a.gguf"}
    )
    store.load_attempts.output(attempt, "stdout", b"loading\n")
    store.load_attempts.output(attempt, "stderr", b"ready\n")
    store.load_attempts.finish(attempt, "ready", exit_code=None)
    resp = await client.get(f"{SITE}/load-captures", params={"status": "ready", "limit": "1"})
    body = await resp.json()
    assert body["enabled"] is True and [c["id"] for c in body["captures"]] == [attempt]
    assert "kcpps_snapshot" not in body["captures"][0]  # summaries carry hashes, not files
    detail = await (await client.get(f"{SITE}/load-captures/{attempt}?node_id=n1")).json()
    assert detail["kcpps_snapshot"] == {"model": "a.gguf"}
    resp = await client.get(
        f"{SITE}/load-captures/{attempt}/output", params={"after_sequence": "1"}
    )
    page = await resp.json()
    assert [(c["sequence"], c["stream"], c["data"]) for c in page["chunks"]] == [
        (2, "stderr", "cmVhZHkK")
    ]
    for path, status in (
        (f"{SITE}/load-captures/missing", 404),
        (f"{SITE}/load-captures/missing/output", 404),
        (f"{SITE}/load-captures/{attempt}?node_id=elsewhere", 404),
        (f"{SITE}/load-captures/{attempt}/output?after_sequence=-1", 400),
        (f"{SITE}/load-captures?kind=boot", 400),
        (f"{SITE}/load-captures?cursor=%%%", 400),
    ):
        assert (await client.get(path)).status == status, path


async def test_load_errors_get_and_delete(store: Store, client: TestClient) -> None:
    store.load_errors.record(
        {"model": "m", "backend": "kobold", "reason": "exit 3", "exit_code": 3}
    )
    body = await (await client.get(f"{SITE}/load-errors")).json()
    assert [e["exit_code"] for e in body["errors"]] == [3]
    resp = await client.delete(f"{SITE}/load-errors")
    assert await resp.json() == {"removed": 1, "cleared": ["n1"], "failed": []}
    assert (await (await client.get(f"{SITE}/load-errors")).json())["errors"] == []


async def test_store_download_streams_a_consistent_copy(
    store: Store, client: TestClient, tmp_path: Path
) -> None:
    for _ in range(100):
        store.record_raw(raw_record(route="/v1/embeddings"))  # still only in the buffer
    resp = await client.get(f"{SITE}/store/download", params={"node_id": "n1"})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/vnd.sqlite3"
    disposition = resp.headers["Content-Disposition"]
    assert re.fullmatch(r'attachment; filename="analytics-n1-\d{8}T\d{6}Z\.sqlite"', disposition)
    data = await resp.read()
    assert int(resp.headers["Content-Length"]) == len(data)
    copy = tmp_path / "downloaded.sqlite"
    copy.write_bytes(data)
    with sqlite3.connect(copy) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT COUNT(*) FROM analytics_events").fetchone()[0] == 100
    assert not list(store.path.parent.glob(".*download-*"))  # the temp copy is gone


@pytest.mark.parametrize("node", ["unknown", "http://10.0.0.5:8080", "127.0.0.1"])
async def test_store_download_refuses_unknown_nodes(client: TestClient, node: str) -> None:
    resp = await client.get(f"{SITE}/store/download", params={"node_id": node})
    assert resp.status == 404
    assert "error" in await resp.json()
