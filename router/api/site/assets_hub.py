"""Model assets on Hugging Face: `model-assets/candidates` (which hub files carry a SHA-256)
and `model-assets/bind` (pin a hash to one repository file at one commit, after checking the
LFS hash). Both use the download service's hub client (docs/downloads.md, S22 rules apply).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from router.api.site.downloads import downloads_of
from router.appkeys import STORE
from router.downloads import UnsafeName
from router.downloads.assets import hf_uri
from router.downloads.names import check_path, check_repo_id, is_commit, is_sha256
from router.edge import addressed_node
from router.errors import BadRequest, Conflict


def _sha(body: dict[str, Any]) -> str:
    value = body.get("sha256")
    if not is_sha256(value):
        raise BadRequest("sha256 must be 64 lowercase hex digits", param="sha256")
    assert isinstance(value, str)
    return value


def _no_token(body: dict[str, Any]) -> None:
    if "token" in body:
        raise BadRequest(
            "the hub token is configured on the router (downloads.token), never sent per request",
            param="token",
        )


async def candidates(request: web.Request, body: dict[str, Any]) -> web.Response:
    node_id = addressed_node(request)
    sha, filename = _sha(body), body.get("filename")
    _no_token(body)
    if not isinstance(filename, str) or not filename or "/" in filename or len(filename) > 255:
        raise BadRequest("filename must be a bare file name", param="filename")
    service = downloads_of(request)
    found = await asyncio.to_thread(service.hub.candidates, sha, filename)
    learned = await request.app[STORE].downloads.asset_origin(sha)
    origin = (
        hf_uri(learned["repository"], learned["commit_sha"], learned["repo_path"])
        if learned
        else None
    )
    return web.json_response(
        {
            "node_id": node_id,
            "sha256": sha,
            "filename": filename,
            "candidates": found,
            "learned": origin,
        }
    )


async def bind(request: web.Request, body: dict[str, Any]) -> web.Response:
    node_id = addressed_node(request)
    sha = _sha(body)
    _no_token(body)
    try:
        repository = check_repo_id(body.get("repository"))
        path = check_path(body.get("repository_path"))
    except UnsafeName as exc:
        raise BadRequest(str(exc), param="repository") from None
    commit = body.get("commit")
    if not is_commit(commit):
        raise BadRequest("commit must be 40 lowercase hex digits", param="commit")
    assert isinstance(commit, str)
    repo = await downloads_of(request).repository(repository, commit)
    if repo.commit != commit:
        raise Conflict(f"{repository}@{commit[:12]} resolves to {repo.commit[:12]}", param="commit")
    listed = next((f for f in repo.files if f.path == path), None)
    if listed is None:
        raise Conflict(
            f"{path!r} is not a file of {repository} at that commit", param="repository_path"
        )
    if listed.sha256 != sha:
        why = "has no LFS hash" if listed.sha256 is None else "has another LFS SHA-256"
        raise Conflict(f"{path!r} {why}; only an equal LFS hash binds", param="sha256")
    await request.app[STORE].downloads.save_asset_origin(
        {
            "sha256": sha,
            "repository": repository,
            "commit_sha": commit,
            "repo_path": path,
            "bound_at": time.time(),
        }
    )
    return web.json_response(
        {"node_id": node_id, "sha256": sha, "hf": hf_uri(repository, commit, path)}
    )
