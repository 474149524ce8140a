"""The download library: the files the router downloaded into downloads.dir, as the store's
rows record them (docs/downloads.md). The listing and the folder scan; the service reads and
writes the rows (router/downloads/service.py).

Staging lives in the same folder (`STAGING`), so a scan never reports it as untracked.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from router.downloads.jobs import Job

STAGING = ".staging"
UNTRACKED_MAX = 1000  # a huge folder must not make an unbounded answer


def listing(rows: list[dict[str, Any]], folder: Path, jobs: Iterable[Job]) -> dict[str, Any]:
    """The library's answer: every row with its `hf://` origin, and the jobs, newest first."""
    return {
        "dir": folder.name,
        "artifacts": [
            {**r, "origin": f"hf://{r['repository']}@{r['commit_sha']}/{r['repo_path']}"}
            for r in rows
        ],
        "jobs": [j.to_json() for j in sorted(jobs, key=lambda j: -j.created_at)],
    }


def scan(folder: Path, rows: list[dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    """(rows whose file is gone, rows whose file changed size, files no row knows); reads the
    folder, so callers run it in a thread. Nothing is hashed here: that is the inventory's."""
    missing, changed = [], []
    for row in rows:
        path = folder / row["path"]
        if not path.is_file():
            missing.append(row["path"])
        elif path.stat().st_size != row["size"]:
            changed.append(row["path"])
    return missing, changed, _untracked(folder, {row["path"] for row in rows})


def _untracked(folder: Path, known: set[str]) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not rel.startswith(STAGING + "/") and rel not in known:
            found.append(rel)
    return found[:UNTRACKED_MAX]
