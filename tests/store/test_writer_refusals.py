"""A value SQLite cannot bind (an int past 64 bits) is one op's refusal: its caller gets the
error at once and the ops written beside it are kept. Before, the sqlite3 module's
OverflowError escaped the refusal path, the batch was dropped and its caller waited forever."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiosqlite
import pytest

from router.store.writer import Op, Writer


async def test_an_unbindable_value_fails_its_caller_and_keeps_the_rest(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "w.sqlite") as db:
        await db.execute("CREATE TABLE t (x INTEGER)")
        await db.commit()
        writer = Writer(db, interval=0.05)
        writer.start()
        loop = asyncio.get_running_loop()
        bad: asyncio.Future[int] = loop.create_future()
        good: asyncio.Future[int] = loop.create_future()
        writer.add_op(Op("INSERT INTO t VALUES (?)", (1,)))
        writer.add_op(Op("INSERT INTO t VALUES (?)", (2**70,), bad), urgent=True)
        writer.add_op(Op("INSERT INTO t VALUES (?)", (3,), good), urgent=True)
        with pytest.raises(OverflowError):
            await asyncio.wait_for(bad, 30)
        assert await asyncio.wait_for(good, 30) == 1
        await writer.close()
        async with db.execute("SELECT x FROM t ORDER BY x") as cursor:
            assert [row[0] for row in await cursor.fetchall()] == [1, 3]
        assert writer.stats.rejected == 1
