"""`document()`: the OpenAPI 3.1 description, built from the route table and the shapes.

Every row of ROUTES becomes one operation per declared method (HEAD is implied by GET and not
listed separately), under its template with `{name:regex}` parameters written as `{name}`. The
row's role becomes the operation's security, its selector the `model` query parameter, its
surface the error shape of the `default` answer. What a handler answers comes from
`ENTRIES[route.handler]` (router/openapi/entries.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from router.classify import ROUTES, BodyMode, Route
from router.domain import Role, Surface
from router.openapi import shapes
from router.openapi.answers import Answer
from router.openapi.entries import ENTRIES, Entry

_PARAM = re.compile(r"\{(\w+)(?::([^{}]+))?\}")
_REF = "#/components/schemas/{model}"
# The error body the edge renders for a route of this surface (router/errors.py error_body).
_ERROR_MODEL: Mapping[Surface, type[BaseModel]] = {
    Surface.OLLAMA: shapes.OllamaError,
    Surface.KOBOLD: shapes.KoboldError,
}
_SECURITY: Mapping[Role, list[dict[str, list[str]]]] = {
    Role.PUBLIC: [],
    Role.INFERENCE: [{"inference": []}, {"admin": []}],
    Role.ADMIN: [{"admin": []}],
    Role.CLUSTER: [{"cluster": []}],
}
_SCHEMES = {
    name: {"type": "http", "scheme": "bearer", "description": text}
    for name, text in (
        ("inference", "An inference key (or an admin key); Authorization: Bearer or X-API-Key"),
        ("admin", "An admin key, or the WebUI session cookie with its CSRF token"),
        ("cluster", "The cluster token (docs/cluster.md)"),
    )
}


class MissingEntry(LookupError):
    """A route row names a handler with no description entry."""


def openapi_path(template: str) -> str:
    return _PARAM.sub(lambda m: "{" + m.group(1) + "}", template)


def _path_params(template: str) -> list[dict[str, Any]]:
    out = []
    for m in _PARAM.finditer(template):
        regex = m.group(2)
        schema: dict[str, Any] = {"type": "string"}
        if regex is None:
            schema["minLength"] = 1
        text = "the rest of the path (may hold '/')" if regex else "one path segment"
        out.append(
            {
                "name": m.group(1),
                "in": "path",
                "required": True,
                "schema": schema,
                "description": text,
            }
        )
    return out


def _selector_and_query(route: Route, entry: Entry) -> list[dict[str, Any]]:
    selector = "model selector (body first, then query, then X-Tensors-Model)"
    named = {q: (selector, False) for q in route.selector.query}
    named |= {q.name: (q.description, q.required) for q in entry.query}
    params = [
        {
            "name": name,
            "in": "query",
            "required": required,
            "schema": {"type": "string"},
            "description": text,
        }
        for name, (text, required) in named.items()
    ]
    if route.selector.header:
        params.append(
            {
                "name": "X-Tensors-Model",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": selector,
            }
        )
    return params


def _media(answer: Answer) -> dict[str, Any]:
    if answer.model is None:
        return {media: {"schema": dict(schema)} for media, schema in answer.media.items()}
    ref: dict[str, Any] = {"$ref": _REF.format(model=answer.model.__name__)}
    return {"application/json": {"schema": {"type": "array", "items": ref} if answer.many else ref}}


def _response(answer: Answer) -> dict[str, Any]:
    out: dict[str, Any] = {"description": answer.description}
    content = _media(answer)
    if content:
        out["content"] = content
    return out


def _default_answer(route: Route, entry: Entry) -> dict[str, Any]:
    if entry.forwarded:
        text = "The router's refusal in the surface's error shape, or the backend's own error"
        return {"description": text}
    model = _ERROR_MODEL.get(route.surface, shapes.Error)
    ref = {"$ref": _REF.format(model=model.__name__)}
    return {
        "description": "An error, in the surface's shape",
        "content": {"application/json": {"schema": ref}},
    }


def _request_body(route: Route, method: str, entry: Entry) -> dict[str, Any] | None:
    if method in ("GET", "HEAD", "DELETE") and route.body is not BodyMode.STREAM:
        return None
    if route.body is BodyMode.NONE:
        return None
    answer = entry.request
    if answer is None:
        return None
    return {"required": False, "description": answer.description, "content": _media(answer)}


def _operation(route: Route, method: str, entry: Entry) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{method.lower()}{re.sub(r'[^A-Za-z0-9]+', '_', openapi_path(route.template))}",
        "summary": entry.summary,
        "tags": [route.surface.value],
        "security": _SECURITY[route.role],
        "x-handler": route.handler,
        "x-role": route.role.value,
        "x-forwarded": entry.forwarded,
        "x-served-by": sorted(f.value for f in route.served_by) or ["router"],
        "parameters": _path_params(route.template) + _selector_and_query(route, entry),
        "responses": {
            **{status: _response(a) for status, a in entry.answers(method).items()},
            "default": _default_answer(route, entry),
        },
    }
    body = _request_body(route, method, entry)
    if body is not None:
        op["requestBody"] = body
    return op


def _entry(route: Route, entries: Mapping[str, Entry]) -> Entry:
    try:
        return entries[route.handler]
    except KeyError:
        raise MissingEntry(
            f"{route.template} names handler {route.handler!r}, which has no entry in "
            "router/openapi/entries.py"
        ) from None


def _models(entries: Iterable[Entry]) -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {
        m.__name__: m for m in (shapes.Error, shapes.OllamaError, shapes.KoboldError)
    }
    for entry in entries:
        answers = [*entry.ok.values(), *(a for m in entry.by_method.values() for a in m.values())]
        for answer in (*answers, entry.request):
            if answer is not None and answer.model is not None:
                found[answer.model.__name__] = answer.model
    return [found[name] for name in sorted(found)]


def build(
    routes: Iterable[Route] = ROUTES, entries: Mapping[str, Entry] = ENTRIES
) -> dict[str, Any]:
    """The description of `routes`; raises MissingEntry for a handler without an entry."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        entry = _entry(route, entries)
        item = paths.setdefault(openapi_path(route.template), {})
        for method in sorted(route.methods - {"HEAD"}):
            if method.lower() in item:
                raise ValueError(f"{route.template}: {method} described twice")
            item[method.lower()] = _operation(route, method, entry)
    _, defs = models_json_schema(
        [(m, "serialization") for m in _models(entries.values())], ref_template=_REF
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tensor-router",
            "version": "1",
            "description": "The routes the router answers (docs/routes.md). Forwarded routes "
            "pass the backend's answer through and are described loosely.",
        },
        "paths": paths,
        "components": {"schemas": defs.get("$defs", {}), "securitySchemes": _SCHEMES},
    }


@cache
def document() -> dict[str, Any]:
    """The router's own description, built once (the table and shapes are constants)."""
    return build()
