"""Request bodies of the download routes -> checked arguments. Pure; raises BadRequest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.downloads.hub import MAX_SEARCH_LIMIT, decode_cursor
from router.downloads.names import UnsafeName, check_repo_id, check_revision
from router.errors import BadRequest

_SORTS = frozenset({"created_at", "downloads", "last_modified", "likes", "trending_score"})
# Body key -> HfApi.list_models argument, and whether it takes a list of strings.
_SEARCH_FIELDS: Mapping[str, tuple[str, bool]] = {
    "query": ("search", False), "author": ("author", False),
    "pipeline_tag": ("pipeline_tag", False), "filters": ("filter", True),
    "num_parameters": ("num_parameters", False), "apps": ("apps", True),
    "inference_providers": ("inference_provider", True),
    "trained_datasets": ("trained_dataset", True),
}  # fmt: skip
_SEARCH_OTHER = frozenset({"node_id", "gated", "inference", "sort", "direction", "cursor", "limit"})
DEFAULT_LIMIT = 20


def _text(body: Mapping[str, Any], key: str, max_len: int = 200) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise BadRequest(f"{key} must be a string of at most {max_len} characters", param=key)
    return value


def _texts(body: Mapping[str, Any], key: str) -> list[str] | None:
    value = body.get(key)
    if value is None or value == []:
        return None
    if (
        not isinstance(value, list)
        or len(value) > 20
        or not all(isinstance(v, str) and 0 < len(v) <= 200 for v in value)
    ):
        raise BadRequest(f"{key} must be a list of at most 20 short strings", param=key)
    return value


def search_query(body: Mapping[str, Any]) -> dict[str, Any]:
    """The search body -> keyword arguments for `Hub.search` (offset from the cursor)."""
    unknown = sorted(set(body) - set(_SEARCH_FIELDS) - _SEARCH_OTHER)
    if unknown:
        raise BadRequest(f"unknown search field {unknown[0][:40]!r}", param=unknown[0][:40])
    query: dict[str, Any] = {}
    for key, (arg, many) in _SEARCH_FIELDS.items():
        value = _texts(body, key) if many else _text(body, key)
        if value is not None:
            query[arg] = value
    gated = body.get("gated")
    if gated is not None and not isinstance(gated, bool):
        raise BadRequest("gated must be true, false or absent", param="gated")
    if gated is not None:
        query["gated"] = gated
    if body.get("inference") not in (None, "warm"):
        raise BadRequest('inference must be "warm" or absent', param="inference")
    if body.get("inference"):
        query["inference"] = "warm"
    sort = _text(body, "sort")
    if sort is not None and sort not in _SORTS:
        raise BadRequest(f"sort must be one of {', '.join(sorted(_SORTS))}", param="sort")
    if sort is not None:
        query["sort"] = sort
    if body.get("direction") not in (None, -1, "desc"):
        raise BadRequest(
            "the hub sorts in descending order only (direction: desc)", param="direction"
        )
    limit = body.get("limit", DEFAULT_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_SEARCH_LIMIT}", param="limit")
    query["limit"], query["offset"] = limit, decode_cursor(body.get("cursor"))
    return query


def repository_of(body: Mapping[str, Any]) -> tuple[str, str | None]:
    try:
        return check_repo_id(body.get("repository")), check_revision(body.get("revision"))
    except UnsafeName as exc:
        raise BadRequest(str(exc), param="repository") from None


def plan_request(body: Mapping[str, Any]) -> tuple[str, str | None, list[Any], str]:
    repo, revision = repository_of(body)
    files = body.get("files", [])
    if not isinstance(files, list) or len(files) > 10_000:
        raise BadRequest("files must be a list of repository paths or patterns", param="files")
    mode = body.get("mode", "smart" if not files else "explicit")
    if mode not in ("smart", "explicit"):
        raise BadRequest('mode must be "smart" or "explicit"', param="mode")
    if "token" in body:
        raise BadRequest(
            "a token is configured on the router (downloads.token or "
            "TENSOR_ROUTER_HF_TOKEN), never sent per request",
            param="token",
        )
    return repo, revision, files, mode


def flag(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false", param=key)
    return value
