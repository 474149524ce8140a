"""The analytics row: its columns, the raw per-request record, and reading usage from a tail.

Standard library only: the event writer process (event_writer.py) imports this module without
the rest of the router, so it starts in milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

TEXT_COLUMNS = ("route", "surface", "lane", "model", "node_id", "backend")
TOKEN_COLUMNS = ("prompt_tokens", "completion_tokens", "total_tokens")
MILLIS_COLUMNS = ("queue_wait_ms", "ttfb_ms", "duration_ms")
COLUMNS = (
    "time",
    *TEXT_COLUMNS,
    "status",
    "upstream_status",
    "error_message",
    *MILLIS_COLUMNS,
    "bytes_in",
    "bytes_out",
    "aborted",
    *TOKEN_COLUMNS,
    "answered_by",
    "key_name",
    "trace_id",
    "cached_tokens",  # prompt tokens the backend took from its cache (migration 0012)
)
INSERT_EVENT = (
    f"INSERT INTO analytics_events ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in COLUMNS)})"
)
# A whole batch in one statement: one bound parameter and one sqlite3_step, so the writer
# thread releases the interpreter lock once per batch instead of twice per row (executemany),
# which under load stalled the event loop on lock handoffs (bench/analytics).
INSERT_EVENTS_JSON = (
    f"INSERT INTO analytics_events ({', '.join(COLUMNS)}) "
    f"SELECT {', '.join(f'value ->> {i}' for i in range(len(COLUMNS)))} FROM json_each(?)"
)
CLIENT_CLOSED = 499

Row = tuple[Any, ...]


# What Recorder.record hands over per request, in this order (row_from_raw reads it):
# wall time, route, surface, lane, model, node_id, backend, status, upstream_status,
# error_message (already sanitized), queue_wait_ms, ttfb_ms, duration seconds, bytes_in,
# bytes_out, aborted, tail (the response's last bytes, for the usage report), and optionally
# answered_by (the guardian model that answered for `model`, docs/guardians.md), key_name
# (the scoped key that sent it, never its secret) and trace_id (the request's trace when
# traces are on, docs/observability.md).
Raw = tuple[Any, ...]


def row_from_raw(raw: Raw) -> Row:
    """The stored row for one request: rounding and usage parsing happen here, off the loop."""
    # wall .. error_message are stored as recorded; the rest is rounded, folded or parsed.
    as_recorded, status = raw[:10], raw[7]
    queue_wait_ms, ttfb_ms, duration_s, bytes_in, bytes_out, aborted, tail = raw[10:17]
    answered_by = raw[17] if len(raw) > 17 else None
    key_name = raw[18] if len(raw) > 18 else None
    trace_id = raw[19] if len(raw) > 19 else None
    usage = sniff_usage(tail)
    return (
        *as_recorded,
        round(queue_wait_ms, 3),
        None if ttfb_ms is None else round(ttfb_ms, 3),
        round(duration_s * 1000.0, 3),
        bytes_in,
        bytes_out,
        1 if aborted or status == CLIENT_CLOSED else 0,
        usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
        usage.get("total_tokens"),
        answered_by,
        key_name,
        trace_id,
        usage.get("cached_tokens"),
    )


# One pass over the tail for every spelling (OpenAI, Ollama, Anthropic); the last match wins.
# Cached prompt tokens: OpenAI `prompt_tokens_details.cached_tokens` (Responses:
# `input_tokens_details.cached_tokens`), llama-server's `timings.cache_n`, Anthropic's
# `cache_read_input_tokens`. A spelling inside a longer name never matches (the quote before).
_USAGE = re.compile(
    rb'"(prompt_tokens|prompt_eval_count|input_tokens|completion_tokens|eval_count'
    rb"|output_tokens|total_tokens|cached_tokens|cache_n|cache_read_input_tokens"
    rb'|cache_creation_input_tokens)"\s*:\s*(\d+)'
)
_USAGE_NAME = {
    b"prompt_tokens": "prompt_tokens",
    b"prompt_eval_count": "prompt_tokens",
    b"input_tokens": "prompt_tokens",
    b"completion_tokens": "completion_tokens",
    b"eval_count": "completion_tokens",
    b"output_tokens": "completion_tokens",
    b"total_tokens": "total_tokens",
    b"cached_tokens": "cached_tokens",
    b"cache_n": "cached_tokens",
    b"cache_read_input_tokens": "anthropic_cache_read",
    b"cache_creation_input_tokens": "anthropic_cache_write",
}


# The final report starts at the last of these: OpenAI's and Anthropic's `usage`, llama-server's
# `timings`, Ollama's counts. A streamed tail is mostly chunks with a quote every few bytes, where
# the regex tries every spelling at each quote (~30 us for 4 KiB, on the event loop for a scoped
# key); from the report's start it reads a few hundred bytes (~3 us; bench/usage_sniff.py).
_REPORT_STARTS = (b'"usage"', b'"timings"', b'"prompt_eval_count"', b'"eval_count"')
_REPORT_WINDOW = 1024  # every dialect's final report fits; earlier counts are earlier reports


def _report_start(tail: bytes) -> int:
    """Where the tail's final usage report starts (the window's start when none is found)."""
    floor = max(0, len(tail) - _REPORT_WINDOW)
    starts = [at for at in (tail.rfind(name, floor) for name in _REPORT_STARTS) if at >= 0]
    return min(starts, default=floor)


def _read_usage(tail: bytes, start: int) -> dict[str, int]:
    found: dict[str, int] = {}
    for name, value in _USAGE.findall(tail, start):
        found[_USAGE_NAME[name]] = int(value)
    return found


def sniff_usage(tail: bytes) -> dict[str, int]:
    """Token counts from the last usage report in the response's final bytes (the last value
    of each spelling wins)."""
    start = _report_start(tail)
    found = _read_usage(tail, start)
    if start and "completion_tokens" in found and "prompt_tokens" not in found:
        # Anthropic's stream gives the prompt's count in message_start, long before the end.
        found = _read_usage(tail, 0)
    # Anthropic's `input_tokens` leaves out what was read from or written to the cache; the
    # prompt is all three (so cached / prompt is a share on every surface).
    read, write = found.pop("anthropic_cache_read", None), found.pop("anthropic_cache_write", 0)
    if read is not None:
        found["cached_tokens"] = read
    if read or write:
        found["prompt_tokens"] = found.get("prompt_tokens", 0) + (read or 0) + write
    if "total_tokens" not in found and found.keys() & {"prompt_tokens", "completion_tokens"}:
        found["total_tokens"] = found.get("prompt_tokens", 0) + found.get("completion_tokens", 0)
    return found


def rows_from_raws(raws: Iterable[Raw], skipped: Callable[[Exception], None]) -> list[Row]:
    """Every convertible record; a malformed one (a router bug) is reported, not fatal."""
    rows: list[Row] = []
    for raw in raws:
        try:
            rows.append(row_from_raw(raw))
        except Exception as exc:
            skipped(exc)
    return rows
