"""`model-assets/substitute`: point one file field of a `.kcpps` in `models.config_dir` at
another file on this node, named by its SHA-256 (a different quantisation fetched with
`model-assets/jobs` or `site/download`, say).

Optimistic: the field's current file must still hash to `expected_sha256`, and the new hash
must be a file the site index or `models.file_roots` holds. Without `confirm: true` the answer
is the preview and nothing is written. The written file is checked by the catalog's parser
first and replaced atomically, as `model-assets/import` does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from router.appkeys import CATALOG, SETTINGS, SITE_FILES
from router.config import KcppsError, ModelConfig, parse_kcpps
from router.downloads.names import is_sha256
from router.edge import addressed_node
from router.errors import BadRequest, Conflict, NotFound
from router.site import write_atomic

FindConfig = Callable[[web.Request, Mapping[str, Any]], ModelConfig]


def _key(body: Mapping[str, Any]) -> tuple[str, int | None, str]:
    field, position = body.get("field"), body.get("position")
    if not isinstance(field, str) or not field or len(field) > 64:
        raise BadRequest(
            "field must name a file field (model_param, sdmodel, lora ...)", param="field"
        )
    if position is not None and (
        isinstance(position, bool) or not isinstance(position, int) or position < 0
    ):
        raise BadRequest("position must be a list index", param="position")
    return field, position, field if position is None else f"{field}[{position}]"


def _hash(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not is_sha256(value):
        raise BadRequest(f"{name} must be 64 lowercase hex digits", param=name)
    assert isinstance(value, str)
    return value


def _replaced(
    raw: Mapping[str, Any], field: str, position: int | None, path: str
) -> dict[str, Any]:
    out = dict(raw)
    if position is None:
        out[field] = path
    else:
        listed = list(out.get(field) or [])
        if position >= len(listed):
            raise BadRequest(f"{field} has no position {position}", param="position")
        listed[position] = path
        out[field] = listed
    return out


async def substitute(
    request: web.Request, body: dict[str, Any], find_config: FindConfig
) -> web.Response:
    node_id = addressed_node(request)
    config = find_config(request, body)
    field, position, key = _key(body)
    expected, wanted = _hash(body, "expected_sha256"), _hash(body, "sha256")
    confirm = body.get("confirm", False)
    if not isinstance(confirm, bool):
        raise BadRequest("confirm must be true or false", param="confirm")
    current = config.components.get(key)
    if current is None:
        raise NotFound(f"{config.path.name} has no file field {key!r}", param="field")
    site = request.app[SITE_FILES]
    stats = await site.stats([str(current)])
    digests = await site.digests(stats.values())
    stat = stats.get(str(current))
    digest = digests.get(stat.real) if stat is not None else None
    if digest is None or digest.sha256 != expected:
        raise Conflict(
            f"{key} no longer holds the file with expected_sha256", param="expected_sha256"
        )
    (found,) = await site.locate([(wanted, "")])
    if found is None:
        raise Conflict(
            "no file on this node has that SHA-256; fetch it first (model-assets/jobs)",
            param="sha256",
        )
    answer = {
        "node_id": node_id,
        "id": config.id,
        "filename": config.path.name,
        "field": key,
        "from": current.name,
        "to": found.stat.path.rsplit("/", 1)[-1],
        "written": False,
    }
    if not confirm:
        return web.json_response(answer)
    settings = request.app[SETTINGS]
    data = json.dumps(_replaced(config.raw, field, position, found.stat.path), indent=2).encode()
    try:
        parse_kcpps(config.path, data, settings.backend.mode, settings.models.file_roots)
    except KcppsError as err:
        raise BadRequest(
            f"the changed configuration is not servable: {err}", param="field"
        ) from None
    await asyncio.to_thread(write_atomic, config.path, data)
    await request.app[CATALOG].refresh()
    return web.json_response({**answer, "written": True})
