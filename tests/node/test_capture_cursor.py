"""The merged load-captures listing pages with one cursor across nodes: paging every node with
the same cursor and merging returns every row exactly once, newest first."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from router.api.node.site_fanout import merge_capture_pages
from router.store.captures import decode_cursor, encode_cursor


def node_page(rows: list[dict[str, Any]], cursor: str | None, limit: int) -> dict[str, Any]:
    """What one node answers: its rows after the cursor, (started_at, id) descending."""
    ordered = sorted(rows, key=lambda r: (r["started_at"], r["id"]), reverse=True)
    if cursor is not None:
        key = decode_cursor(cursor)
        ordered = [r for r in ordered if (r["started_at"], r["id"]) < key]
    page = ordered[:limit]
    more = len(ordered) > limit
    last = page[-1] if page else None
    next_cursor = encode_cursor(last["started_at"], last["id"]) if more and last else None
    return {"captures": page, "next_cursor": next_cursor}


@given(
    st.lists(st.lists(st.integers(0, 20), max_size=12), min_size=1, max_size=4),
    st.integers(1, 5),
)
def test_one_cursor_pages_every_node_once(times: list[list[int]], limit: int) -> None:
    nodes = [
        [
            {"id": f"n{n}-{i:02d}", "started_at": float(t), "node_id": f"n{n}"}
            for i, t in enumerate(ts)
        ]
        for n, ts in enumerate(times)
    ]
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(100):
        pages = [node_page(rows, cursor, limit) for rows in nodes]
        rows, cursor = merge_capture_pages(pages, limit)
        assert len(rows) <= limit
        seen += rows
        if cursor is None:
            break
    everything = sorted(
        (r for rows in nodes for r in rows), key=lambda r: (r["started_at"], r["id"]), reverse=True
    )
    assert seen == everything
