"""The store's named parts (`store.benchmarks`, `.downloads`, `.guardians`, `.links`,
`.lending`, `.costs`) on a real file: each writes through the store's one writer and reads what
was written a moment ago, a multi-row replace is one transaction, and a part reads through the
store's reader of the moment (the store may move its connections to a fresh file)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from router.store import Store
from router.store.db import connect
from router.store.lending import DecisionFilter
from tests.support.store import store_at


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with store_at(tmp_path) as store:
        yield store


async def test_each_part_writes_and_reads_back(store: Store) -> None:
    await store.guardians.save(("node", "n1", "m", "n2", "g"))
    assert [r["guardian_model_id"] for r in await store.guardians.rows()] == ["g"]
    assert await store.guardians.delete("node", "n1", "m") == 1

    now = time.time()
    run = ("r1", "run", "n1", "m", "general", "done", now, now, 1.0, "{}", None)
    await store.benchmarks.save(run)
    assert (await store.benchmarks.latest())["m"]["id"] == "r1"
    assert [r["id"] for r in await store.benchmarks.runs("m", 5)] == ["r1"]

    origin = {
        "sha256": "ab" * 32,
        "repository": "o/r",
        "commit_sha": "c" * 40,
        "repo_path": "x.gguf",
        "bound_at": now,
    }
    await store.downloads.save_asset_origin(origin)
    assert await store.downloads.asset_origin("ab" * 32) == origin
    assert await store.downloads.jobs() == []

    await store.lending.replace_saved({"enabled": True, "window": 60})
    await store.lending.replace_saved({"window": 30})
    assert await store.lending.saved() == {"window": 30}
    assert await store.costs.samples(0.0) == []


async def test_links_replace_is_one_transaction_and_counts_the_removed(store: Store) -> None:
    row = ("text", "n1", "m", "n2", "h", 1, 0)
    assert await store.links.replace("text", ("n1", "m"), [row]) == 0
    other = ("text", "n1", "m", "n3", "h", 0, 1)
    assert await store.links.replace("text", ("n1", "m"), [other]) == 1
    rows = await store.links.rows()
    assert [(r["helper_node_id"], r["restore_after_borrow"]) for r in rows] == [("n3", True)]


async def test_parts_read_through_the_stores_current_reader(store: Store) -> None:
    store.lending.add_decision(
        (time.time(), "plan", "t", "lent", "[]", "text", "n1", "m", "n2", "h", "v", "{}")
    )
    old = store._reader
    store._reader = await connect(store.path, read_only=True)  # as a reopen does
    await old.close()
    page = await store.lending.decision_page(DecisionFilter())
    assert [d["outcome"] for d in page["decisions"]] == ["lent"]
    assert [r["helper_node_id"] for r in await store.links.rows()] == []
