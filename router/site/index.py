"""This node's model files: the scan of `models.file_roots` plus the hash cache, and the
lookups the site routes need (a path the inventory knows, a SHA-256 this node holds).

Request-named paths are never opened unless they are files the scan itself listed; the scan
runs in a worker thread, and so does every stat.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from router.site.files import FileStat, confined, real_roots, scan_roots, stat_file, suspicious
from router.site.hashing import Digest, HashCache, Hasher, HashRows, digest_file


@dataclass(frozen=True, slots=True)
class Located:
    source: str  # "index" (the hash cache) or "file_roots" (found by hashing the scan)
    stat: FileStat


class SiteFiles:
    def __init__(self, roots: Sequence[Path], rows: HashRows, hasher: Hasher = digest_file) -> None:
        self.roots = tuple(Path(r) for r in roots)
        self.cache = HashCache(rows, hasher)

    @property
    def real_roots(self) -> tuple[str, ...]:
        return real_roots(self.roots)

    async def scan(self, extra: Iterable[str] = ()) -> list[FileStat]:
        """Model files under the roots (and the `extra` paths inside them), off the loop."""
        return await asyncio.to_thread(scan_roots, self.roots, tuple(extra))

    async def stats(self, paths: Iterable[str]) -> dict[str, FileStat]:
        """Stat of each path that is a file (wherever it is: configs name their own files)."""
        wanted = tuple(paths)
        found = await asyncio.to_thread(lambda: [stat_file(p) for p in wanted])
        return {p: s for p, s in zip(wanted, found, strict=True) if s is not None}

    async def digests(self, stats: Iterable[FileStat]) -> dict[str, Digest]:
        return await self.cache.digests(stats)

    async def known_file(self, path: str) -> FileStat | None:
        """The scanned file `path` names (as listed, or relative to a root); None otherwise."""
        if suspicious(path):
            return None
        listed = await self.scan()
        by_path = {s.path: s for s in listed}
        candidates = [path] if os.path.isabs(path) else [str(r / path) for r in self.roots]
        for candidate in candidates:
            if candidate in by_path:
                # Checked again just before reading: a link swapped since the scan must not
                # lead out of the roots.
                return await asyncio.to_thread(stat_file, candidate, self.real_roots)
        return None

    async def locate(self, wanted: Sequence[tuple[str, str]]) -> list[Located | None]:
        """Where this node holds each (sha256, expected file name): a cached row that is
        still true, else the scan, hashed once for all of them (files with an expected name
        first, so the likely match is read before the rest)."""
        found: dict[str, Located] = {}
        for sha in {w[0] for w in wanted}:
            holders = await self.holders(sha)
            if holders:
                found[sha] = Located("index", holders[0])
        missing = {sha for sha, _ in wanted if sha not in found}
        if missing:
            listed = await self.scan()
            names = {name for sha, name in wanted if sha in missing}
            named = [s for s in listed if os.path.basename(s.path) in names]
            rest = [s for s in listed if os.path.basename(s.path) not in names]
            for group in (named, rest):
                if not missing:
                    break
                digests = await self.digests(group)
                for stat in group:
                    digest = digests.get(stat.real)
                    if digest is not None and digest.sha256 in missing:
                        found[digest.sha256] = Located("file_roots", stat)
                        missing.discard(digest.sha256)
        return [found.get(sha) for sha, _ in wanted]

    async def holders(self, sha256: str) -> list[FileStat]:
        """Every cached file with this hash that is still the file that was hashed (no reads)."""
        roots = self.real_roots
        rows = await self.cache.known()
        cached = [p for p, row in rows.items() if row[2] == sha256]
        current = await asyncio.to_thread(lambda: [stat_file(p, roots) for p in cached])
        return [
            s for s in current if s is not None and (rows[s.real][0], rows[s.real][1]) == s.stamp
        ]

    def inside(self, real: str) -> bool:
        return confined(real, self.real_roots)
