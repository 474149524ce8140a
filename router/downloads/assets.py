"""Model assets on the hub: which repository files carry a given SHA-256. Pure."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from router.downloads.names import UnsafeName, check_path, check_repo_id
from router.downloads.plan import RepoFile, Repository

# A quantisation or precision tag at the end of a GGUF stem (Q4_K_M, IQ3_XS, F16, BF16...).
_QUANT = re.compile(r"[-_.](?:i?q\d[a-z0-9_]*|f16|f32|bf16)$", re.IGNORECASE)
MAX_CANDIDATE_REPOS = 10


def search_terms(filename: str) -> list[str]:
    """What to search the hub for: the file's stem, then the stem without its quant tag."""
    stem = PurePosixPath(filename).name
    stem = stem[: -len(PurePosixPath(stem).suffix)] if PurePosixPath(stem).suffix else stem
    terms = [stem] if stem else []
    shorter = _QUANT.sub("", stem)
    if shorter and shorter != stem:
        terms.append(shorter)
    return terms


def matching(repo: Repository, sha256: str) -> list[RepoFile]:
    """Files whose LFS SHA-256 is `sha256` (only LFS hashes count: they are content hashes)."""
    return [f for f in repo.files if f.sha256 == sha256]


def hf_uri(repository: str, commit: str, path: str) -> str:
    return f"hf://{repository}@{commit}/{path}"


_HF_URI = re.compile(r"^hf://([^@\s]+)@([0-9a-f]{40})/(.+)$")


def parse_hf_uri(value: object) -> tuple[str, str, str] | None:
    """`hf://owner/name@commit/path` -> (repository, commit, path); None if it is not one
    (a malformed or unsafe origin is never followed)."""
    match = _HF_URI.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    try:
        return check_repo_id(match.group(1)), match.group(2), check_path(match.group(3))
    except UnsafeName:
        return None


def pinned_origin(
    doc: dict[str, object], field: str, position: int | None
) -> tuple[str, str, str] | None:
    """The `<field>_hf` a portable config carries for one slot (parallel list for lists)."""
    value = doc.get(f"{field}_hf")
    if position is not None:
        value = value[position] if isinstance(value, list) and position < len(value) else None
    return parse_hf_uri(value)
