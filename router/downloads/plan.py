"""What a download will do, decided before any byte moves. Pure: the repository listing, the
free space and what already lies in the library are handed in.

A plan names every file (repository path, size, how it will be verified, where it lands),
the total against the free space minus `downloads.free_space_reserve_gb`, the files it would
replace, the files the hub flags as unsafe, and whether the token grants access to a gated
repository. `blockers()` says what stops a job from starting.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from router.downloads.names import UnsafeName, check_path, is_sha256, path_problem

Access = Literal["granted", "denied", "not_required"]
_GIT_SHA1_LEN = 40
SKIPPED_BY_SMART = frozenset({".gitattributes"})


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int | None
    sha256: str | None = None  # the LFS object's SHA-256
    blob_id: str | None = None  # the git blob's SHA-1 (a non-LFS file's only hash)

    @property
    def verify(self) -> str:
        """How the bytes are checked: `sha256` (LFS), `git-sha1` (the blob id) or `size`."""
        if self.sha256 is not None and is_sha256(self.sha256):
            return "sha256"
        if self.blob_id is not None and len(self.blob_id) == _GIT_SHA1_LEN:
            return "git-sha1"
        return "size"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "lfs": self.sha256 is not None,
            "verify": self.verify,
        }


@dataclass(frozen=True)
class Repository:
    id: str
    commit: str
    files: tuple[RepoFile, ...]
    unsafe_names: tuple[tuple[str, str], ...] = ()  # listed by the hub, never fetched
    gated: str | bool = False
    private: bool = False
    license: str | None = None
    flagged: tuple[str, ...] = ()  # paths the hub's security scan reports
    tags: tuple[str, ...] = ()

    def to_json(self, revision: str | None) -> dict[str, Any]:
        return {
            "repository": self.id,
            "revision": revision or "main",
            "commit": self.commit,
            "gated": self.gated,
            "private": self.private,
            "license": self.license,
            "tags": list(self.tags),
            "security": {"flagged": list(self.flagged)},
            "files": [f.to_json() for f in self.files],
            "total_bytes": sum(f.size or 0 for f in self.files),
            "refused_names": [{"path": p, "reason": r} for p, r in self.unsafe_names],
        }


def split_listing(
    entries: Sequence[tuple[str, int | None, str | None, str | None]],
) -> tuple[tuple[RepoFile, ...], tuple[tuple[str, str], ...]]:
    """(path, size, lfs sha256, blob id) rows -> safe files and refused (path, reason)."""
    safe: list[RepoFile] = []
    refused: list[tuple[str, str]] = []
    for path, size, sha256, blob in entries:
        problem = path_problem(path)
        if problem is not None:
            refused.append((path[:200] if isinstance(path, str) else "?", problem))
        else:
            safe.append(RepoFile(path, size, sha256.lower() if sha256 else None, blob))
    return tuple(sorted(safe, key=lambda f: f.path)), tuple(refused)


def choose(repo: Repository, wanted: Sequence[object], mode: str) -> tuple[RepoFile, ...]:
    """The files asked for: exact paths or glob patterns, each matching at least one listed
    file. `smart` with nothing asked takes every file but `.gitattributes`."""
    if mode not in ("smart", "explicit"):
        raise UnsafeName('mode must be "smart" or "explicit"')
    if not wanted:
        if mode == "explicit":
            raise UnsafeName("explicit mode needs a list of files")
        return tuple(f for f in repo.files if f.path not in SKIPPED_BY_SMART)
    by_path = {f.path: f for f in repo.files}
    refused = dict(repo.unsafe_names)
    chosen: dict[str, RepoFile] = {}
    for item in wanted:
        if not isinstance(item, str):
            raise UnsafeName("files must be a list of repository paths")
        if item in refused:
            raise UnsafeName(f"{item[:100]!r}: {refused[item]}")
        matches = [by_path[item]] if item in by_path else _globbed(repo.files, item)
        if not matches:
            check_path(item)  # a traversal name is reported as such, not as "missing"
            raise UnsafeName(f"{item[:100]!r} is not a file of {repo.id} at {repo.commit[:12]}")
        chosen.update((f.path, f) for f in matches)
    return tuple(sorted(chosen.values(), key=lambda f: f.path))


def _globbed(files: Sequence[RepoFile], pattern: str) -> list[RepoFile]:
    if not any(ch in pattern for ch in "*?["):
        return []
    return [f for f in files if fnmatch.fnmatchcase(f.path, pattern)]


@dataclass(frozen=True)
class Present:
    """A file already at a plan's target: its size, the SHA-256 the library recorded for it
    and the commit it came from (None for a file the library did not place)."""

    size: int
    sha256: str | None = None
    commit: str | None = None

    def same_as(self, f: RepoFile, commit: str) -> bool:
        """The listed file: by its LFS hash, or (no hash listed) by commit and size."""
        if self.size != f.size or self.sha256 is None:
            return False
        return self.sha256 == f.sha256 if f.sha256 is not None else self.commit == commit


@dataclass(frozen=True)
class Plan:
    repository: Repository
    revision: str | None
    files: tuple[RepoFile, ...]  # to transfer
    skipped: tuple[str, ...]  # already in the library with the same hash
    replacements: tuple[str, ...]
    free_bytes: int
    reserve_bytes: int
    access: Access
    flagged: tuple[str, ...] = field(default=())

    @property
    def total_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.free_bytes - self.reserve_bytes

    def blockers(self, *, confirm_replace: bool, confirm_unsafe: bool) -> list[str]:
        out: list[str] = []
        if self.access == "denied":
            out.append("the token does not grant access to this gated repository")
        if not self.fits:
            out.append(
                f"{self.total_bytes} bytes do not fit: {self.free_bytes} free, "
                f"{self.reserve_bytes} kept in reserve (downloads.free_space_reserve_gb)"
            )
        if self.replacements and not confirm_replace:
            out.append("files would be replaced; send confirm_replace: true")
        if self.flagged and not confirm_unsafe:
            out.append("the hub flags files as unsafe; send confirm_unsafe: true")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "repository": self.repository.id,
            "revision": self.revision or "main",
            "commit": self.repository.commit,
            "gated": self.repository.gated,
            "access": self.access,
            "files": [f.to_json() for f in self.files],
            "skipped": list(self.skipped),
            "replacements": list(self.replacements),
            "unsafe": list(self.flagged),
            "total_bytes": self.total_bytes,
            "free_bytes": self.free_bytes,
            "reserve_bytes": self.reserve_bytes,
            "fits": self.fits,
            "blockers": self.blockers(confirm_replace=False, confirm_unsafe=False),
        }


def make_plan(
    repo: Repository,
    revision: str | None,
    chosen: Sequence[RepoFile],
    present: Mapping[str, Present],
    free_bytes: int,
    reserve_bytes: int,
    access: Access,
) -> Plan:
    """`present` maps repository paths to what already lies at their target."""
    transfer: list[RepoFile] = []
    skipped: list[str] = []
    replaced: list[str] = []
    for f in chosen:
        there = present.get(f.path)
        if there is None:
            transfer.append(f)
        elif there.same_as(f, repo.commit):
            skipped.append(f.path)
        else:
            replaced.append(f.path)
            transfer.append(f)
    flagged = tuple(f.path for f in transfer if f.path in repo.flagged)
    return Plan(
        repo,
        revision,
        tuple(transfer),
        tuple(skipped),
        tuple(replaced),
        free_bytes,
        reserve_bytes,
        access,
        flagged,
    )
