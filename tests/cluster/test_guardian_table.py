"""`GuardianTable` owns the assignments in force: a change goes to the store, then the stored
set is what requests read (docs/guardians.md); on a real SQLite store."""

from __future__ import annotations

from pathlib import Path

from router.cluster import Assignment, GuardianTable
from tests.support.store import open_store


async def test_assign_replace_and_clear_go_through_the_store(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    try:
        table = await GuardianTable.load(store.guardians)
        assert table.assignments == ()
        first = Assignment("model", "n1", "plain", "n1", "eyes")
        await table.assign(first)
        assert table.assignments == (first,) and table.resolve("n1", "plain") == first
        better = Assignment("model", "n1", "plain", "n2", "sharper")
        await table.assign(better)  # the same scope and key: replaced, not added
        assert table.assignments == (better,)
        assert [r["guardian_model_id"] for r in await store.guardians.rows()] == ["sharper"]
        # What a restart loads is what is in force.
        assert (await GuardianTable.load(store.guardians)).assignments == (better,)
        assert await table.clear("model", "n1", "plain") == 1
        assert table.assignments == () and await store.guardians.rows() == []
        assert await table.clear("model", "n1", "plain") == 0
    finally:
        await store.close()
