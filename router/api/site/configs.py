"""Site routes that write `.kcpps` files: config-file preview/apply/delete and cook.

This node answers for itself only: a `node_id` naming another node is a 404. Every write goes
through the catalog's write lock (so "exists?" and "write" cannot interleave with another write),
lands atomically, and is followed by a catalog refresh, whose `catalog` event on
/router/v1/events is published by the catalog's `on_change` hook (app.py) exactly as for a
file edited on disk. The rules are in docs/site.md and docs/decisions.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from router import site
from router.appkeys import CATALOG, SETTINGS
from router.config import ModelConfig
from router.domain import Lane
from router.edge import Handler, addressed_node, match_of, read_json
from router.errors import BadRequest, Conflict, NotFound
from router.site import Finding
from router.store.captures import sanitize_kcpps

COOK_MARKS = ".cook"  # config_dir/.cook/<id>.json: what cook wrote (a dot folder: never scanned)


@dataclass
class Draft:
    """One file the route would write, with everything said about it."""

    config_id: str
    filename: str
    options: dict[str, Any]
    findings: list[Finding]
    config: ModelConfig | None
    current: bytes | None  # the file's bytes now, None when absent

    @property
    def data(self) -> bytes:
        return site.render(self.options)


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false", param=name)
    return value


def _options(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("options", {})
    if not isinstance(options, dict):
        raise BadRequest("options must be a JSON object of .kcpps keys", param="options")
    return options


def _head(request: web.Request, node_id: str, draft_id: str, filename: str) -> dict[str, Any]:
    return {
        "node_id": node_id,
        "node_url": request.app[SETTINGS].cluster.public_url,
        "id": draft_id,
        "filename": filename,
    }


async def _current(path: Path) -> bytes | None:
    try:
        return await asyncio.to_thread(site.existing, path)
    except OSError:
        raise Conflict(f"{path.name} exists and is not a regular file", param="filename") from None


async def _check(
    request: web.Request,
    config_id: str,
    filename: str,
    options: dict[str, Any],
    findings: list[Finding],
) -> Draft:
    """Parse the would-be file as the catalog will, and add what the catalog would say."""
    settings, catalog = request.app[SETTINGS], request.app[CATALOG]
    path = settings.models.config_dir / filename
    config, parsed = await asyncio.to_thread(
        site.check_config, path, options, settings.backend.mode, settings.models.file_roots
    )
    findings = [*findings, *parsed]
    if config is not None:
        missing = await asyncio.to_thread(catalog.missing_files, config)
        findings += site.catalog_findings(config, catalog.all_configs(), missing, "options")
    return Draft(config_id, filename, options, findings, config, await _current(path))


def _refuse(draft: Draft, overwrite: bool, code: str) -> None:
    """Apply writes nothing when the preview would show an error, or would overwrite unasked."""
    error = site.first_error(draft.findings)
    if error is not None:
        more = sum(f.severity == "error" for f in draft.findings) - 1
        tail = f" (and {more} more; see preview)" if more else ""
        raise BadRequest(error.message + tail, param=error.field, code=code)
    if draft.current is not None and not overwrite:
        raise Conflict(
            f"{draft.filename} already exists; send overwrite: true to replace it",
            param="overwrite",
            code="config_exists",
        )


async def _write(request: web.Request, draft: Draft, *, cooked: bool) -> None:
    folder = request.app[SETTINGS].models.config_dir
    data = draft.data
    await asyncio.to_thread(site.write_atomic, folder / draft.filename, data)
    marks = folder / COOK_MARKS
    if cooked:
        mark = json.dumps({"filename": draft.filename, "sha256": hashlib.sha256(data).hexdigest()})
        await asyncio.to_thread(_mark, marks, draft.config_id, mark.encode())
    else:  # the file is no longer what cook wrote, so cook's DELETE must not take it
        await asyncio.to_thread(_unmark, marks, draft.config_id)


def _mark(marks: Path, config_id: str, data: bytes) -> None:
    marks.mkdir(exist_ok=True)
    site.write_atomic(marks / f"{config_id}.json", data)


def _unmark(marks: Path, config_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(marks / f"{config_id}.json")


def _validation(draft: Draft, node_id: str) -> list[dict[str, Any]]:
    return [f.as_json(node_id) for f in draft.findings]


# ---- config-file -------------------------------------------------------------------------------


async def _config_file(request: web.Request, apply: bool) -> web.Response:
    body = await read_json(request, required=True)
    node_id = addressed_node(request)
    config_id, filename = site.config_name(body)
    overwrite = _flag(body, "overwrite")
    kept, screened = site.screen_options(_options(body))
    catalog = request.app[CATALOG]
    async with catalog.write_lock:
        draft = await _check(request, config_id, filename, kept, screened)
        if apply:
            _refuse(draft, overwrite, "invalid_config")
            await _write(request, draft, cooked=False)
            await catalog.refresh()
    answer = _head(request, node_id, config_id, filename)
    answer.update(
        would_overwrite=draft.current is not None,
        unchanged=draft.current == draft.data,
        options=draft.options,
        validation=_validation(draft, node_id),
    )
    if apply:
        answer.update(written=True, config_sha256=hashlib.sha256(draft.data).hexdigest())
    return web.json_response(answer)


async def _config_file_delete(request: web.Request) -> web.Response:
    body = await read_json(request) or dict(request.query)
    node_id = addressed_node(request)
    config_id, filename = site.config_name(body)
    folder = request.app[SETTINGS].models.config_dir
    catalog = request.app[CATALOG]
    async with catalog.write_lock:
        if await _current(folder / filename) is None:
            raise NotFound(f"no configuration file {filename}", param="filename")
        await asyncio.to_thread(site.remove_file, folder, filename)
        await asyncio.to_thread(_unmark, folder / COOK_MARKS, config_id)
        await catalog.refresh()
    return web.json_response({**_head(request, node_id, config_id, filename), "deleted": True})


# ---- cook --------------------------------------------------------------------------------------


async def _cook(request: web.Request, apply: bool) -> web.Response:
    body = await read_json(request, required=True)
    node_id = addressed_node(request)
    cook_id = site.plain_name(body.get("id"), "id")
    overwrite = _flag(body, "overwrite")
    kept, screened = site.screen_options(_options(body))
    settings, catalog = request.app[SETTINGS], request.app[CATALOG]
    # A snapshot: the plan runs in a worker thread while refreshes may run on the loop.
    known = {i: c for c in catalog.all_configs() for i in (c.id, c.image_id) if i is not None}
    async with catalog.write_lock:
        plan = await asyncio.to_thread(
            site.plan_cook,
            body.get("components"),
            kept,
            node_id=node_id,
            default_mode=settings.backend.mode,
            resolve=known.get,
            probe=functools.partial(site.probe_model_file, roots=settings.models.file_roots),
            cpu_count=os.cpu_count() or 1,
        )
        findings = [*screened, *plan.findings]
        draft = await _check(request, cook_id, cook_id + site.SUFFIX, plan.options, findings)
        if apply:
            _refuse(draft, overwrite, "invalid_cook")
            await _write(request, draft, cooked=True)
            await catalog.refresh()
    answer: dict[str, Any] = {
        "node_id": node_id,
        "plan": _plan(request, node_id, draft, plan),
        "options": draft.options,
        "validation": _validation(draft, node_id),
    }
    if apply:
        answer.update(written=True, config_sha256=hashlib.sha256(draft.data).hexdigest())
    return web.json_response(answer)


def _plan(request: web.Request, node_id: str, draft: Draft, plan: site.CookPlan) -> dict[str, Any]:
    config = draft.config
    image_id = config.image_id if config is not None else None
    text_side = config is not None and bool(config.lanes - {Lane.IMAGE})
    entry = _head(request, node_id, draft.config_id, draft.filename)
    entry.pop("id")
    entry.update(
        model_id=draft.config_id,
        image_id=image_id,
        kinds=plan.kinds,
        sources=plan.sources,
        reused=draft.current == draft.data,
        would_overwrite=draft.current is not None,
    )
    return {
        "id": draft.config_id,
        "public_id": draft.config_id if text_side else image_id,
        "public_image_id": image_id,
        "requires_master_recipe": False,  # every component is on this node (others are refused)
        "configs": [entry],
    }


async def _cook_delete(request: web.Request, tail: str) -> web.Response:
    node_id = addressed_node(request)
    cook_id = site.plain_name(tail, "id")
    filename = cook_id + site.SUFFIX
    folder = request.app[SETTINGS].models.config_dir
    catalog = request.app[CATALOG]
    async with catalog.write_lock:
        mark = await asyncio.to_thread(_read_mark, folder / COOK_MARKS, cook_id)
        current = await _current(folder / filename)
        if current is None:
            await asyncio.to_thread(_unmark, folder / COOK_MARKS, cook_id)
            raise NotFound(f"no configuration file {filename}", param="id")
        if mark is None or mark.get("filename") != filename:
            raise Conflict(
                f"{filename} was not written by cook; delete it with DELETE "
                "/router/v1/site/config-file",
                param="id",
                code="not_cooked",
            )
        if mark.get("sha256") != hashlib.sha256(current).hexdigest():
            raise Conflict(
                f"{filename} was edited after cook wrote it; delete it with DELETE "
                "/router/v1/site/config-file",
                param="id",
                code="edited",
            )
        await asyncio.to_thread(site.remove_file, folder, filename)
        await asyncio.to_thread(_unmark, folder / COOK_MARKS, cook_id)
        await catalog.refresh()
    return web.json_response({**_head(request, node_id, cook_id, filename), "deleted": True})


def _read_mark(marks: Path, cook_id: str) -> dict[str, Any] | None:
    try:
        mark = json.loads((marks / f"{cook_id}.json").read_bytes())
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) else None


# ---- the route table's handlers (router/classify/table.py: one row each) ---------------------


async def _config_file_route(request: web.Request) -> web.Response:
    return await _config_file_read(request, match_of(request).params["config_id"])


async def _config_file_read(request: web.Request, name: str) -> web.Response:
    """GET config-file/{id}: the file's options as the routes would write them back (refused
    and router-owned keys screened out, each reported), plus a sanitized copy for display."""
    node_id = addressed_node(request)
    config_id, filename = site.config_name({"id": name.removesuffix(site.SUFFIX)})
    path = request.app[SETTINGS].models.config_dir / filename
    data = await _current(path)
    if data is None:
        raise NotFound(f"no configuration file {filename}")
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Conflict(f"{filename} is not JSON: {exc}", code="invalid_config") from exc
    if not isinstance(raw, dict):
        raise Conflict(f"{filename} is not a JSON object", code="invalid_config")
    kept, screened = site.screen_options(raw)
    answer = _head(request, node_id, config_id, filename)
    answer.update(
        options=kept,
        sanitized=sanitize_kcpps(kept, [str(Path.home())]),
        validation=[f.as_json(node_id) for f in screened],
        config_sha256=hashlib.sha256(data).hexdigest(),
    )
    return web.json_response(answer)


async def _cook_delete_route(request: web.Request) -> web.Response:
    return await _cook_delete(request, match_of(request).params["cook_id"])


HANDLERS: dict[str, Handler] = {
    "site.config_file_delete": _config_file_delete,
    "site.config_file_preview": functools.partial(_config_file, apply=False),
    "site.config_file_apply": functools.partial(_config_file, apply=True),
    "site.config_file_read": _config_file_route,
    "site.cook_preview": functools.partial(_cook, apply=False),
    "site.cook_apply": functools.partial(_cook, apply=True),
    "site.cook_delete": _cook_delete_route,
}
