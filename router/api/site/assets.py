"""Model assets: portable `.kcpps` export, resolution on this node, import, hash lookup.

Each action under `/router/v1/site/model-assets/` is one row of the route table.
Resolution looks in the hash cache first, then hashes what the scan of `models.file_roots`
finds (docs/site.md, "Model assets"). Import writes only when every field resolves.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from router.api.site import asset_jobs, asset_substitute, assets_hub
from router.appkeys import CATALOG, SETTINGS, SITE_FILES
from router.config import ID_PATTERN, MAX_KCPPS_BYTES, KcppsError, ModelConfig, parse_kcpps
from router.edge import Handler, addressed_node, match_of, read_json
from router.errors import (
    BadRequest,
    Conflict,
    NotFound,
)
from router.site import (
    SHA256,
    PortableError,
    SiteFiles,
    export_portable,
    portable_slots,
    runnable,
    write_atomic,
)

MAX_BATCH = 100


def _config(request: web.Request, body: Mapping[str, Any]) -> ModelConfig:
    """The configuration `id` (text or image ID) or `filename` names, disabled ones included."""
    model_id, filename = body.get("id"), body.get("filename")
    if model_id is None and filename is None:
        raise BadRequest("give id or filename", param="id")
    for name, value in (("id", model_id), ("filename", filename)):
        if value is not None and (not isinstance(value, str) or not value):
            raise BadRequest(f"{name} must be a non-empty string", param=name)
    for config in request.app[CATALOG].all_configs():
        if model_id in (config.id, config.image_id) or filename == config.path.name:
            return config
    raise NotFound(f"no configuration {model_id or filename!r}", param="id")


async def export(request: web.Request, body: dict[str, Any]) -> web.Response:
    node_id = addressed_node(request)
    config = _config(request, body)
    site = request.app[SITE_FILES]
    stats = await site.stats(str(p) for p in config.components.values())
    digests = await site.digests(stats.values())
    hashes = {}
    for key, path in config.components.items():
        stat = stats.get(str(path))
        digest = digests.get(stat.real) if stat is not None else None
        if digest is not None:
            hashes[key] = digest.sha256
    try:
        portable = export_portable(config.raw, config.components, hashes)
    except PortableError as err:
        raise Conflict(str(err), param=err.field) from None
    return web.json_response(
        {"node_id": node_id, "id": config.id, "filename": config.path.name, "kcpps": portable}
    )


async def _document(request: web.Request, item: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(file name, portable JSON) from an inline `kcpps` or a file in models.config_dir."""
    inline = item.get("kcpps")
    if inline is not None:
        if not isinstance(inline, dict):
            raise BadRequest("kcpps must be a JSON object", param="kcpps")
        # Only echoed back: an inline document is never looked up by name.
        model_id = item.get("id")
        return (f"{model_id}.kcpps" if _safe_id(model_id) else "portable.kcpps"), inline
    name = item.get("filename") or (
        f"{item['id']}.kcpps" if isinstance(item.get("id"), str) else None
    )
    if not isinstance(name, str) or not name.endswith(".kcpps") or not ID_PATTERN.match(name[:-6]):
        raise BadRequest("give kcpps, or the id or filename of a .kcpps in config_dir", param="id")
    path = Path(request.app[SETTINGS].models.config_dir) / name
    raw = await asyncio.to_thread(_read_small, path)
    if raw is None:
        raise NotFound(f"no configuration file {name!r}", param="filename")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest(f"{name} is not valid JSON", param="filename") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"{name} is not a JSON object", param="filename")
    return name, doc


def _safe_id(value: Any) -> bool:
    return isinstance(value, str) and ID_PATTERN.match(value) is not None


def _read_small(path: Path) -> bytes | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_KCPPS_BYTES:
            return None
        return path.read_bytes()
    except OSError:
        return None


async def _resolve_doc(site: SiteFiles, doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    try:
        slots = portable_slots(doc)
    except PortableError as err:
        raise BadRequest(str(err), param=err.field) from None
    located = await site.locate([(slot.sha256, slot.filename) for slot in slots])
    return [
        {
            "field": slot.field,
            "position": slot.position,
            "hash": slot.sha256,
            "filename": slot.filename,
            "resolved": found is not None,
            "source": found.source if found else None,
            "path": found.stat.path if found else None,
            "failure": None if found else "no file under models.file_roots has this SHA-256",
        }
        for slot, found in zip(slots, located, strict=True)
    ]


async def _resolve_item(request: web.Request, item: Mapping[str, Any]) -> dict[str, Any]:
    name, doc = await _document(request, item)
    results = await _resolve_doc(request.app[SITE_FILES], doc)
    resolved = all(r["resolved"] for r in results)
    return {"id": name[:-6], "filename": name, "resolved": resolved, "results": results}


async def resolve(request: web.Request, body: dict[str, Any]) -> web.Response:
    node_id = addressed_node(request)
    return web.json_response({"node_id": node_id, **await _resolve_item(request, body)})


async def resolve_batch(request: web.Request, body: dict[str, Any]) -> web.Response:
    node_id = addressed_node(request)
    items = body.get("items")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise BadRequest("items must be a list of objects", param="items")
    if len(items) > MAX_BATCH:
        raise BadRequest(f"at most {MAX_BATCH} items", param="items")
    results = [await _resolve_item(request, item) for item in items]
    return web.json_response({"node_id": node_id, "items": results})


async def import_portable(request: web.Request, body: dict[str, Any]) -> web.Response:
    node_id = addressed_node(request)
    model_id, doc = body.get("id"), body.get("kcpps")
    if not isinstance(model_id, str) or not ID_PATTERN.match(model_id):
        raise BadRequest("id must be 1-128 letters, digits, '.', '_' or '-'", param="id")
    if not isinstance(doc, dict):
        raise BadRequest("kcpps must be a JSON object", param="kcpps")
    overwrite = body.get("overwrite", False)
    if not isinstance(overwrite, bool):
        raise BadRequest("overwrite must be true or false", param="overwrite")
    settings = request.app[SETTINGS]
    target = Path(settings.models.config_dir) / f"{model_id}.kcpps"
    results = await _resolve_doc(request.app[SITE_FILES], doc)
    missing = [r for r in results if not r["resolved"]]
    if missing:
        field = _label(missing[0])
        raise Conflict(
            f"{field} does not resolve on this node: {missing[0]['failure']}", param=field
        )
    paths = {_label(r): r["path"] for r in results}
    data = json.dumps(runnable(doc, paths), indent=2).encode()
    try:  # the file must be one the catalog will serve, or it is not written at all
        parse_kcpps(target, data, settings.backend.mode, settings.models.file_roots)
    except KcppsError as err:
        raise BadRequest(
            f"the resolved configuration is not servable: {err}", param="kcpps"
        ) from None
    if not overwrite and await asyncio.to_thread(target.exists):
        raise Conflict(f"{target.name} exists; send overwrite: true", param="overwrite")
    await asyncio.to_thread(write_atomic, target, data)
    await request.app[CATALOG].refresh()
    return web.json_response(
        {
            "node_id": node_id,
            "id": model_id,
            "filename": target.name,
            "written": True,
            "results": results,
        }
    )


def _label(result: Mapping[str, Any]) -> str:
    pos = result["position"]
    return str(result["field"]) if pos is None else f"{result['field']}[{pos}]"


async def asset(request: web.Request, sha256: str) -> web.Response:
    node_id = addressed_node(request)
    if not SHA256.match(sha256):
        raise BadRequest("the hash must be 64 lowercase hex digits", param="sha256")
    holders = await request.app[SITE_FILES].holders(sha256)
    first = holders[0] if holders else None
    return web.json_response(
        {
            "sha256": sha256,
            "available": first is not None,
            "filename": first.path.rsplit("/", 1)[-1] if first else None,
            "size": first.size if first else None,
            "origin": "local" if first else None,
            "nodes": [{"node_id": node_id, "paths": [h.path for h in holders]}] if holders else [],
        }
    )


def _posted(action: Callable[[web.Request, dict[str, Any]], Awaitable[web.Response]]) -> Handler:
    """A POST action with its required JSON body."""

    async def handler(request: web.Request) -> web.Response:
        return await action(request, await read_json(request, required=True))

    return handler


async def _job_start(request: web.Request) -> web.Response:
    body = await read_json(request, required=True)
    return await asset_jobs.start(request, body, _document, _resolve_doc)


async def _job(request: web.Request) -> web.Response:
    return await asset_jobs.status(request, match_of(request).params["job_id"])


async def _asset(request: web.Request) -> web.Response:
    return await asset(request, match_of(request).params["sha256"])


HANDLERS: dict[str, Handler] = {
    "site.assets_export": _posted(export),
    "site.assets_resolve": _posted(resolve),
    "site.assets_resolve_batch": _posted(resolve_batch),
    "site.assets_import": _posted(import_portable),
    "site.assets_candidates": _posted(assets_hub.candidates),
    "site.assets_bind": _posted(assets_hub.bind),
    "site.assets_substitute": _posted(
        functools.partial(asset_substitute.substitute, find_config=_config)
    ),
    "site.assets_job_start": _job_start,
    "site.assets_job": _job,
    "site.assets_hash": _asset,
}
