"""The lending decision log (docs/lending.md) on a real router and its SQLite file: rows
recorded through `app[LENDING].decisions` reach the store through the batched writer, the site route
pages and filters them newest first, retention prunes them, and the store download has them."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from router import __version__
from router.appkeys import LENDING, STORE
from router.config import AnalyticsSection
from router.lending.decisions import Decision, decision_row
from router.store import Store
from router.store import store as store_module
from router.store.lending import DecisionFilter
from tests.support.harness import RouterHarness

DECISIONS_PATH = "/router/v1/site/offload/decisions"
SETTINGS_PATH = "/router/v1/site/offload/settings"


def sample(index: int, **kw: object) -> Decision:
    fields: dict[str, object] = {
        "kind": ("plan", "dispatch", "helper")[index % 3],
        "outcome": ("skipped", "lent", "borrowed_returned")[index % 3],
        "lane": "text" if index % 2 == 0 else "image",
        "owner_node_id": "m",
        "owner_model_id": f"owner-{index % 4}",
        "helper_node_id": "s1",
        "helper_model_id": "fast" if index % 5 == 0 else "other",
        "trigger": "enqueued" if index % 3 == 0 else "",
        "reasons": ("cost_rejected", "outranked") if index % 3 == 0 else (),
        "detail": {"index": index},
    }
    fields.update(kw)
    return Decision(**fields)  # type: ignore[arg-type]


async def test_recorded_decisions_page_and_filter_newest_first(harness: RouterHarness) -> None:
    client = await harness.start()
    assert harness.app is not None
    log = harness.app[LENDING].decisions
    pending = harness.app[STORE].pending
    for index in range(30):
        log.record(sample(index))
    # Handed to the writer's buffer, not written by the request that recorded them.
    assert harness.app[STORE].pending >= pending + 30
    reply = await client.get(DECISIONS_PATH)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    rows = body["decisions"]
    assert [r["detail"]["index"] for r in rows] == list(range(29, -1, -1))
    assert body["next_before"] is None
    ids = [r["id"] for r in rows]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 30
    first = rows[-1]
    assert set(first) == {
        "id",
        "at",
        "kind",
        "trigger",
        "outcome",
        "reasons",
        "lane",
        "owner_node_id",
        "owner_model_id",
        "helper_node_id",
        "helper_model_id",
        "router_version",
        "detail",
    }
    assert first["kind"] == "plan" and first["trigger"] == "enqueued"
    assert first["reasons"] == ["cost_rejected", "outranked"]
    assert first["router_version"] == __version__
    assert abs(first["at"] - time.time()) < 60

    # Pages of 7 walk all 30 rows once, in order.
    seen: list[int] = []
    before: int | None = None
    while True:
        params: dict[str, str | int] = {"limit": 7} | ({"before": before} if before else {})
        page = (await client.get(DECISIONS_PATH, params=params)).json()
        seen += [r["detail"]["index"] for r in page["decisions"]]
        assert len(page["decisions"]) <= 7
        before = page["next_before"]
        if before is None:
            break
        assert before == page["decisions"][-1]["id"]
    assert seen == list(range(29, -1, -1))

    async def indices(**params: str) -> list[int]:
        reply = await client.get(DECISIONS_PATH, params=params)
        assert reply.status_code == 200, reply.text
        return [r["detail"]["index"] for r in reply.json()["decisions"]]

    assert await indices(kind="helper") == [i for i in range(29, -1, -1) if i % 3 == 2]
    assert await indices(lane="image") == [i for i in range(29, -1, -1) if i % 2 == 1]
    assert await indices(model_id="owner-1") == [i for i in range(29, -1, -1) if i % 4 == 1]
    assert await indices(model_id="fast") == [i for i in range(29, -1, -1) if i % 5 == 0]
    both = await indices(kind="plan", lane="text", model_id="owner-0")
    assert both == [i for i in range(29, -1, -1) if i % 3 == 0 and i % 2 == 0 and i % 4 == 0]

    for params in (
        {"limit": "0"},
        {"limit": "501"},
        {"limit": "ten"},
        {"before": "-1"},
        {"before": "x"},
        {"kind": "lend"},
        {"lane": "voice"},
        {"model_id": "m" * 300},
        {"node_url": "http://127.0.0.1:1"},
    ):
        reply = await client.get(DECISIONS_PATH, params=params)
        assert reply.status_code == 400, (params, reply.text)
        assert reply.json()["error"]["param"] == next(iter(params))
    assert (await client.get(DECISIONS_PATH, params={"node_id": "elsewhere"})).status_code == 404


async def test_retention_prunes_old_rows_and_the_download_has_the_table(
    harness: RouterHarness, tmp_path: Path
) -> None:
    client = await harness.start()
    assert harness.app is not None
    log = harness.app[LENDING].decisions
    now = time.time()
    for age in (7200.0, 3600.0, 5.0, 0.0):
        log.record(sample(int(age), at=now - age, detail={"age": age}))
    assert len((await client.get(DECISIONS_PATH)).json()["decisions"]) == 4
    reply = await client.post(
        SETTINGS_PATH, json={"settings": {"offload_decisions_retention": "10m"}}
    )
    assert reply.status_code == 200, reply.text
    ages = [r["detail"]["age"] for r in (await client.get(DECISIONS_PATH)).json()["decisions"]]
    assert ages == [0.0, 5.0]
    assert harness.app[STORE].lending.decision_retention == 600.0

    download = await client.get("/router/v1/site/store/download")
    assert download.status_code == 200
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(download.content)
    with sqlite3.connect(copy) as db:
        rows = db.execute(
            'SELECT kind, "trigger", outcome, detail, router_version FROM offload_decisions'
            " ORDER BY id"
        ).fetchall()
        saved = db.execute("SELECT key, value FROM lending_settings").fetchall()
    assert [r[3] for r in rows] == ['{"age": 5.0}', '{"age": 0.0}']
    assert all(r[4] == __version__ for r in rows)
    assert saved == [("offload_decisions_retention", "600.0")]


async def test_a_restart_prunes_with_the_saved_retention(harness: RouterHarness) -> None:
    client = await harness.start()
    assert harness.app is not None
    reply = await client.post(
        SETTINGS_PATH, json={"settings": {"offload_decisions_retention": "1h"}}
    )
    assert reply.status_code == 200, reply.text
    harness.app[LENDING].decisions.record(sample(1, at=time.time() - 10, detail={"keep": False}))
    harness.app[LENDING].decisions.record(sample(2, detail={"keep": True}))
    assert len((await client.get(DECISIONS_PATH)).json()["decisions"]) == 2
    await harness.close()
    # Backdate one row past the retention in the file, as time passing would.
    db_path = harness.tmp / "data" / "router.sqlite"
    with sqlite3.connect(db_path) as db:
        db.execute(
            "UPDATE offload_decisions SET at = at - 7200 WHERE detail = ?", ('{"keep": false}',)
        )
    client = await harness.start()
    kept = [r["detail"] for r in (await client.get(DECISIONS_PATH)).json()["decisions"]]
    assert kept == [{"keep": True}]


async def test_the_writers_hourly_pass_prunes_decisions_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass that expires raw analytics (Store._hourly) also expires decision rows once the
    lending context has set the retention."""
    store = await Store.open(
        tmp_path / "router.sqlite", node_id="n1", analytics=AnalyticsSection(writer_process=False)
    )
    try:
        store.lending.decision_retention = 600.0
        store.lending.add_decision(decision_row(sample(1, at=time.time() - 3600), "v"))
        store.lending.add_decision(decision_row(sample(2), "v"))
        await store.flush()  # within the hour since open: nothing pruned yet
        assert len((await store.lending.decision_page(DecisionFilter()))["decisions"]) == 2
        monkeypatch.setattr(store_module, "RETENTION_PERIOD", 0.0)
        await store.flush()  # the writer runs its periodic pass before answering a flush
        left = (await store.lending.decision_page(DecisionFilter()))["decisions"]
        assert [row["detail"]["index"] for row in left] == [2]
    finally:
        await store.close()
