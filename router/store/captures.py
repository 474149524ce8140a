"""Load captures: sanitising what a load attempt records, output capping, and list paging.

A capture may be downloaded with the whole database (`store/download`), so nothing that goes in
may carry a credential or a local directory layout: `.kcpps` snapshots lose credential keys and
keep only file names of absolute paths, and argv loses the values of secret-bearing flags.
"""

from __future__ import annotations

import base64
import binascii
import json
import ntpath
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from router.errors import BadRequest
from router.store.where import Where

REDACTED = "[redacted]"
_CREDENTIAL_KEYS = frozenset({"password", "adminpassword", "hordekey", "hordeconfig"})
# Judged per word of the name so `--max-num-batched-tokens` or `ttswavtokenizer` stay visible
# while `--api-key`, `--hf-token`, `--ssl-keyfile` and `hordekey` do not.
_CREDENTIAL_WORD = re.compile(r"key$|^key|token$|passw(or)?d|secret|credential")
_WINDOWS_ABS = re.compile(r"^[A-Za-z]:[\\/]|^\\\\")
STREAMS = ("stdout", "stderr")


def _is_credential(name: str) -> bool:
    words = re.split(r"[-_.\s]+", name.lower().strip("-"))
    if "".join(words) in _CREDENTIAL_KEYS:
        return True
    return any(_CREDENTIAL_WORD.search(word) for word in words if word)


def strip_path(text: str, home_dirs: Sequence[str]) -> str:
    if text.startswith("/"):
        return posixpath.basename(text.rstrip("/")) or text
    if _WINDOWS_ABS.match(text):
        return ntpath.basename(text.rstrip("\\/")) or text
    if text.startswith("~"):
        return posixpath.basename(text.rstrip("/")) or text
    for home in home_dirs:
        if home and home in text:
            text = text.replace(home, "~")
    return text


def _clean(value: Any, home_dirs: Sequence[str]) -> Any:
    if isinstance(value, str):
        return strip_path(value, home_dirs)
    if isinstance(value, Mapping):
        return sanitize_kcpps(value, home_dirs)
    if isinstance(value, list | tuple):
        return [_clean(item, home_dirs) for item in value]
    return value


def sanitize_kcpps(raw: Mapping[str, Any], home_dirs: Iterable[str] = ()) -> dict[str, Any]:
    """A copy without credential keys, with absolute paths reduced to their file names."""
    homes = tuple(str(home).rstrip("/\\") for home in home_dirs if str(home).strip("/\\"))
    return {
        str(key): _clean(value, homes) for key, value in raw.items() if not _is_credential(str(key))
    }


def argv_without_secrets(argv: Iterable[str], home_dirs: Iterable[str] = ()) -> list[str]:
    """argv with the values of secret flags (`--api-key X`, `--password=X`, ...) redacted."""
    homes = tuple(str(home).rstrip("/\\") for home in home_dirs if str(home).strip("/\\"))
    result: list[str] = []
    redacting = False
    for arg in map(str, argv):
        if arg.startswith("-"):
            flag, eq, value = arg.partition("=")
            redacting = _is_credential(flag)
            if eq:
                result.append(f"{flag}={REDACTED if redacting else strip_path(value, homes)}")
            else:
                result.append(flag)
            redacting = redacting and not eq
        elif redacting:
            result.append(REDACTED)  # every value up to the next flag (--hordeconfig takes 5)
        else:
            result.append(strip_path(arg, homes))
    return result


@dataclass
class LiveCapture:
    """Per-attempt output accounting, kept in memory so capture_output() never reads disk."""

    cap_bytes: int
    sequence: int = 0
    stored: int = 0
    truncated: bool = False

    def admit(self, data: bytes) -> tuple[bytes, bool] | None:
        """The part of `data` that fits and whether this chunk hits the cap; None = over it."""
        if self.truncated:
            return None
        room = self.cap_bytes - self.stored
        if len(data) > room:
            self.truncated = True
            data = data[:room]
        self.stored += len(data)
        self.sequence += 1
        return data, self.truncated


def encode_cursor(started_at: float, attempt_id: str) -> str:
    raw = json.dumps([started_at, attempt_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        started_at, attempt_id = json.loads(raw)
        return float(started_at), str(attempt_id)
    except (binascii.Error, ValueError, TypeError, RecursionError) as exc:
        raise BadRequest("the cursor is not one this router issued", param="cursor") from exc


SUMMARY_COLUMNS = (
    "id",
    "node_id",
    "kind",
    "status",
    "model",
    "backend",
    "lane",
    "asset_hashes_json",
    "exit_code",
    "error",
    "started_at",
    "ended_at",
    "duration_ms",
    "output_bytes",
    "output_truncated",
    "readahead_json",
    "trace_id",
    "pooled_json",
)
DETAIL_COLUMNS = (*SUMMARY_COLUMNS, "kcpps_json", "argv_json")


@dataclass(frozen=True)
class CaptureFilter:
    nodes: Sequence[str] = ()
    status: str | None = None
    kind: str | None = None
    backend: str | None = None
    from_ts: float | None = None
    to_ts: float | None = None
    limit: int = 50
    cursor: str | None = None

    def query(self) -> tuple[str, list[Any]]:
        """Newest first, keyed on (started_at, id) so pages never repeat or skip a row."""
        where = Where()
        if self.nodes:
            where.add(f"node_id IN ({', '.join('?' for _ in self.nodes)})", *self.nodes)
        where.given("status = ?", self.status)
        where.given("kind = ?", self.kind)
        where.given("backend = ?", self.backend)
        where.given("started_at >= ?", self.from_ts)
        where.given("started_at < ?", self.to_ts)
        if self.cursor:
            started_at, attempt_id = decode_cursor(self.cursor)
            where.add(
                "(started_at < ? OR (started_at = ? AND id < ?))",
                started_at,
                started_at,
                attempt_id,
            )
        sql = f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM load_attempts{where.clause()}"
        sql += " ORDER BY started_at DESC, id DESC LIMIT ?"
        # One extra row tells whether there is a next page.
        return sql, [*where.params, self.limit + 1]


def attempt_dict(columns: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    record = dict(zip(columns, row, strict=True))
    for name in ("asset_hashes_json", "kcpps_json", "argv_json", "readahead_json", "pooled_json"):
        if name in record:
            raw = record.pop(name)
            record[name.removesuffix("_json")] = None if raw is None else json.loads(raw)
    record["output_truncated"] = bool(record["output_truncated"])
    if "kcpps" in record:
        record["kcpps_snapshot"] = record.pop("kcpps")
    return record


def chunk_dict(row: Sequence[Any]) -> dict[str, Any]:
    sequence, stream, time, data, truncated = row
    return {
        "sequence": sequence,
        "stream": stream,
        "time": time,
        "data": base64.b64encode(data).decode("ascii"),
        "truncated": bool(truncated),
    }


# The durations of the last successful loads per model, oldest first (LoadTimes.seed).
LOAD_DURATIONS = """
SELECT model, duration_ms FROM (
  SELECT model, duration_ms, started_at,
         ROW_NUMBER() OVER (PARTITION BY model ORDER BY started_at DESC) AS rn
  FROM load_attempts
  WHERE kind = 'load' AND status = 'ok' AND model IS NOT NULL AND duration_ms IS NOT NULL
) WHERE rn <= ? ORDER BY model, started_at
"""
