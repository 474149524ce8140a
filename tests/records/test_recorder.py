"""The per-request analytics row: the Recorder's raw record, its row, and how the store writes it."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from router.records import Metrics, Recorder, RequestInfo
from router.store.db import connect, migrate
from router.store.rows import (
    COLUMNS,
    INSERT_EVENT,
    Raw,
    Row,
    _report_start,
    row_from_raw,
    sniff_usage,
)
from router.store.writer import Writer

SECRET = "sk-do-not-store-1234567890"


class Rows:
    def __init__(self) -> None:
        self.rows: list[Row] = []

    def record_raw(self, raw: Raw) -> None:
        self.rows.append(row_from_raw(raw))


def info(**kw: Any) -> RequestInfo:
    base: dict[str, Any] = {
        "route": "/v1/chat/completions",
        "surface": "openai",
        "lane": "text",
        "started": time.monotonic() - 0.25,
        "wall": 1_764_400_000.5,
        "model": "m1",
        "family": "llamacpp",
        "queue_wait_ms": 12.34567,
    }
    return RequestInfo(**{**base, **kw})


CASES: list[dict[str, Any]] = [
    {
        "status": 200,
        "upstream_status": 200,
        "ttfb_ms": 3.14159,
        "bytes_in": 10,
        "bytes_out": 99,
        "tail": b'{"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}',
    },
    {"status": 499, "aborted": False, "tail": b'data: {"choices":[]}\n\n'},
    {
        "status": 502,
        "upstream_status": 500,
        "error_message": f"backend said no; key {SECRET} " + "x" * 900,
        "aborted": True,
    },
    {"status": 200, "tail": b'{"done":true,"prompt_eval_count":3,"eval_count":4}'},
]


@pytest.mark.parametrize("case", CASES)
def test_recorder_row_holds_what_the_request_did(case: dict[str, Any]) -> None:
    """The row the writer stores (rows.row_from_raw of what Recorder.record hands over)."""
    recorder = Recorder(Metrics(CollectorRegistry()), "node-a", secrets=(SECRET,))
    sink = Rows()
    recorder.sink = sink
    request = info()
    recorder.record(request, **case)
    (row,) = sink.rows
    as_event = dict(zip(COLUMNS, row, strict=True))
    assert as_event["route"] == "/v1/chat/completions" and as_event["node_id"] == "node-a"
    assert as_event["queue_wait_ms"] == 12.346 and as_event["time"] == request.wall
    assert 249.0 < as_event["duration_ms"] < 10_000.0
    assert as_event["aborted"] == (1 if case.get("aborted") or case["status"] == 499 else 0)
    for name in ("status", "upstream_status", "bytes_in", "bytes_out"):
        assert as_event[name] == case.get(name, 0 if name.startswith("bytes") else None)
    assert as_event["ttfb_ms"] == (round(case["ttfb_ms"], 3) if "ttfb_ms" in case else None)
    assert (as_event["model"], as_event["backend"]) == ("m1", "llamacpp")
    assert (as_event["surface"], as_event["lane"]) == ("openai", "text")
    for name, value in sniff_usage(case.get("tail", b"")).items():
        assert as_event[name] == value
    if "error_message" in case:
        assert SECRET not in as_event["error_message"]
        assert as_event["error_message"].startswith("backend said no")
        assert len(as_event["error_message"].encode()) <= 512  # S25


def test_without_a_sink_metrics_still_count_the_request() -> None:
    registry = CollectorRegistry()
    recorder = Recorder(Metrics(registry), "node-a")
    recorder.record(info(), status=200)
    samples = [s for m in registry.collect() for s in m.samples if s.name.endswith("_total")]
    assert any(s.value == 1.0 for s in samples)


ODD_ROWS: list[Row] = [
    (
        1.5,
        "/x",
        "openai",
        "text",
        "modèle-ü-模型-😀",
        "n",
        "llamacpp",
        200,
        None,
        'quote " backslash \\ newline \n tab \t',
        0.0,
        None,
        1e-3,
        0,
        2**53,
        1,
        None,
        0,
        -1,
        "guardian-ü",
        "key-ü",
        "4bf92f3577b34da6a3ce929d0e0e4736",
        2**40,  # cached_tokens
    ),
    (
        2.0,
        "",
        None,
        None,
        None,
        "n",
        None,
        0,
        599,
        None,
        None,
        None,
        None,
        None,
        None,
        0,
        2**62,
        None,
        None,
        None,
        None,
        None,
        None,
    ),
]


async def test_json_batches_store_the_same_values_and_types_as_plain_inserts(
    tmp_path: Path,
) -> None:
    """The in-process writer's one JSON parameter per batch must not change a value or type."""
    db = await connect(tmp_path / "router.sqlite")
    await migrate(db)
    writer = Writer(db, 60.0)
    writer.start()
    try:
        writer.add_events(list(ODD_ROWS))
        assert await writer.flush(checkpoint=False) == len(ODD_ROWS)
        assert (writer.stats.replayed, writer.stats.rejected) == (0, 0)  # no row-by-row replay
    finally:
        await writer.close()
        await db.close()
    reference = sqlite3.connect(tmp_path / "reference.sqlite")
    schema = sqlite3.connect(tmp_path / "router.sqlite")
    (ddl,) = schema.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'analytics_events'"
    ).fetchone()
    reference.execute(ddl)
    reference.executemany(INSERT_EVENT, ODD_ROWS)
    typed = ", ".join(f"{c}, typeof({c})" for c in COLUMNS)
    query = f"SELECT {typed} FROM analytics_events ORDER BY id"
    assert schema.execute(query).fetchall() == reference.execute(query).fetchall()


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        (
            b'"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}',
            {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        ),
        (
            b'{"done":true,"prompt_eval_count":3,"eval_count":4}',
            {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        ),
        (
            b'"usage":{"input_tokens":9, "output_tokens" : 1}',
            {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
        ),
        (
            b'{"usage":{"completion_tokens":1}}\n\n{"usage":{"completion_tokens":6}}',
            {"completion_tokens": 6, "total_tokens": 6},
        ),
        # Cached prompt tokens (issue 33), as llama-server 0.6.0-dev spells them on each surface.
        (
            b'"usage":{"completion_tokens":3,"prompt_tokens":519,"total_tokens":522,'
            b'"prompt_tokens_details":{"cached_tokens":518}},"timings":{"cache_n":518}}',
            {
                "prompt_tokens": 519,
                "completion_tokens": 3,
                "total_tokens": 522,
                "cached_tokens": 518,
            },
        ),
        (
            b'"usage":{"input_tokens":519,"output_tokens":3,"total_tokens":522,'
            b'"input_tokens_details":{"cached_tokens":518}}}',
            {
                "prompt_tokens": 519,
                "completion_tokens": 3,
                "total_tokens": 522,
                "cached_tokens": 518,
            },
        ),
        (  # Anthropic: input_tokens leaves out the cache read, the prompt is both
            b'"usage":{"cache_read_input_tokens":518,"input_tokens":1,"output_tokens":3}}',
            {
                "prompt_tokens": 519,
                "completion_tokens": 3,
                "total_tokens": 522,
                "cached_tokens": 518,
            },
        ),
        (
            b'"usage":{"cache_creation_input_tokens":10,"input_tokens":2,"output_tokens":3}}',
            {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        ),
        (b'"timings":{"cache_n":40,"prompt_n":2}}', {"cached_tokens": 40}),
        (b'data: {"choices":[{"delta":{"content":"\\"eval_count\\": 5"}}]}', {}),
        (b"", {}),
    ],
)
def test_sniff_usage_reads_the_last_report_of_each_dialect(
    tail: bytes, expected: dict[str, int]
) -> None:
    assert sniff_usage(tail) == expected


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


CHUNK = _sse({"choices": [{"delta": {"content": "w"}, "finish_reason": None}], "usage": None})


def test_the_usage_is_read_from_the_final_report_not_the_whole_tail() -> None:
    # A streamed tail is mostly chunks; reading all of it cost ~30 us a request on the loop.
    final = _sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 300}})
    final += _sse({"timings": {"cache_n": 4}}) + b"data: [DONE]\n\n"
    tail = (CHUNK * 100 + final)[-4096:]
    assert _report_start(tail) == tail.index(b'"usage":{')
    assert sniff_usage(tail) == {
        "prompt_tokens": 5,
        "completion_tokens": 300,
        "total_tokens": 305,
        "cached_tokens": 4,
    }
    bare = (CHUNK.replace(b',"usage":null', b"") * 100)[-4096:]
    assert _report_start(bare) == len(bare) - 1024  # no report: only the last KiB is read
    assert sniff_usage(bare) == {}


def test_a_short_anthropic_stream_keeps_the_prompt_count_of_message_start() -> None:
    start = _sse({"type": "message_start", "message": {"usage": {"input_tokens": 7}}})
    delta = _sse({"type": "content_block_delta", "delta": {"text": "w"}})
    end = _sse({"type": "message_delta", "usage": {"output_tokens": 20}})
    tail = start + delta * 20 + end
    assert _report_start(tail) > len(start)
    assert sniff_usage(tail) == {"prompt_tokens": 7, "completion_tokens": 20, "total_tokens": 27}
