"""Which names a download may use (S21): repository IDs, revisions and repository paths.

Pure. A name the hub lists is untrusted too: a path that fails here is never fetched and never
becomes a file name, whoever supplied it.
"""

from __future__ import annotations

import re
import unicodedata

MAX_PATH_CHARS = 1024
MAX_REVISION_CHARS = 256
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DRIVE = re.compile(r"^[A-Za-z]:")


class UnsafeName(ValueError):
    """A name refused, with the reason a client can act on."""


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in text)


def check_repo_id(value: object) -> str:
    """`owner/name` (or a bare `name`), each part plain: letters, digits, `.`, `_`, `-`."""
    if not isinstance(value, str) or not value:
        raise UnsafeName("repository must be a non-empty string like owner/name")
    parts = value.split("/")
    if len(parts) > 2 or not all(_PART.match(p) and ".." not in p for p in parts):
        raise UnsafeName(f"repository {value[:100]!r} is not a plain owner/name")
    return value


def check_revision(value: object) -> str | None:
    """A branch, tag or commit name; None means the default branch."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_REVISION_CHARS:
        raise UnsafeName("revision must be a branch, tag or commit name")
    if _has_control(value) or ".." in value or value.startswith("/") or "\\" in value:
        raise UnsafeName(f"revision {value[:100]!r} is not a plain name")
    return value


def is_commit(value: object) -> bool:
    return isinstance(value, str) and _COMMIT.match(value) is not None


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and _SHA256.match(value) is not None


def path_problem(path: object) -> str | None:
    """Why `path` is not a safe repository path, or None. Folders inside the repository are
    kept (`a/b.gguf`); nothing may climb out, start at a root, or hide a control character."""
    if not isinstance(path, str) or not path:
        return "the path is empty"
    if len(path) > MAX_PATH_CHARS:
        return f"the path is longer than {MAX_PATH_CHARS} characters"
    if _has_control(path):
        return "the path holds a control character"
    if "\\" in path or path.startswith("/") or _DRIVE.match(path):
        return "the path is absolute or uses a backslash"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "the path has an empty, '.' or '..' segment"
    if parts[0] == ".staging" or any(
        part.startswith(".") and part.endswith(".part") for part in parts
    ):
        return "the path uses a name the downloader keeps for itself"
    return None


def check_path(path: object) -> str:
    problem = path_problem(path)
    if problem is not None:
        shown = path[:100] if isinstance(path, str) else type(path).__name__
        raise UnsafeName(f"{shown!r}: {problem}")
    assert isinstance(path, str)
    return path
