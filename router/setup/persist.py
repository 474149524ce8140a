"""Finished init jobs on disk: `<dir>/<job id>.json` (the record) and `<job id>.output.json`
(its chunks, base64), written atomically; only the newest `keep` jobs are kept."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

from router.config.files import write_atomic
from router.setup.job import Chunk

_JOB_ID = re.compile(r"^[0-9a-f]{32}$")


def save_job(folder: Path, record: dict[str, Any], chunks: list[Chunk], keep: int) -> None:
    job_id = record["id"]
    rows = [[s, st, t, base64.b64encode(d).decode("ascii"), tr] for s, st, t, d, tr in chunks]
    write_atomic(folder / f"{job_id}.output.json", json.dumps(rows).encode(), make_parent=True)
    write_atomic(folder / f"{job_id}.json", json.dumps(record).encode(), make_parent=True)
    records = sorted(
        (p for p in folder.glob("*.json") if _JOB_ID.match(p.stem)), key=lambda p: p.stat().st_mtime
    )
    for old in records[:-keep]:
        old.unlink(missing_ok=True)
        old.with_name(f"{old.stem}.output.json").unlink(missing_ok=True)


def load_record(folder: Path, job_id: str) -> dict[str, Any] | None:
    if not _JOB_ID.match(job_id):
        return None
    try:
        data = json.loads((folder / f"{job_id}.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_chunks(folder: Path, job_id: str) -> list[Chunk]:
    try:
        rows = json.loads((folder / f"{job_id}.output.json").read_text("utf-8"))
        return [
            (int(s), str(st), float(t), base64.b64decode(d), bool(tr)) for s, st, t, d, tr in rows
        ]
    except (OSError, ValueError, TypeError):
        return []


def latest_records(folder: Path) -> dict[str, dict[str, Any]]:
    """The newest finished job of each backend (for the node state after a restart)."""
    newest: dict[str, dict[str, Any]] = {}
    for path in folder.glob("*.json"):
        if not _JOB_ID.match(path.stem):
            continue
        record = load_record(folder, path.stem)
        if record is None or not isinstance(record.get("backend_id"), str):
            continue
        known = newest.get(record["backend_id"])
        if known is None or record.get("started_at", 0) > known.get("started_at", 0):
            newest[record["backend_id"]] = record
    return newest
