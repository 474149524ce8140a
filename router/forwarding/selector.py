"""Find the model a request names, reading at most `scan_limit` bytes of its body.

Sources, in precedence order (the first that names a model wins):
1. the body: JSON keys of the route's SelectorRule (in the rule's order), or its multipart
   field when the Content-Type is multipart/form-data;
2. the query parameters of the rule (`model`, for images also `sd_model_checkpoint`);
3. the `X-Tensors-Model` header.

Within one source a repeated name resolves to its LAST occurrence: duplicate JSON keys behave as
Python's `json` does (the last wins), and so do repeated query parameters, headers and multipart
fields. `"model": null`, `""` and whitespace-only values count as absent. A selector that is
present but not a string (object, number, list, bool) is a 400, as are a non-object JSON body,
invalid JSON or UTF-8, nesting too deep to parse, and names with control characters or longer
than MAX_MODEL_BYTES.

Which body parser runs depends on Content-Type (`body_kind`): multipart/form-data is scanned for
the form field; JSON, text/plain, form-urlencoded (curl -d) and a missing type are held to JSON's
rules; any other type (octet-stream, audio) is parsed only when it starts like a JSON object.

A body larger than the scan limit is scanned as a prefix: top-level keys are walked one value at
a time with `json.JSONDecoder.raw_decode` and the rest of the body is never parsed. A selector
that is not complete within the prefix is "no selector" (the last one seen within it counts).

The body parsers and the value check are pure and live in router/forwarding/body_selector.py.
Everything here but `read_selector` and `body_stream` is pure; those two only touch
`request.content`, and the bytes they read are kept so the proxy forwards the exact body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from router.classify import BodyMode, Route, SelectorRule
from router.errors import PayloadTooLarge, UnsupportedMediaType
from router.forwarding.body_selector import check_model, select_from_body

SELECTOR_HEADER = "X-Tensors-Model"


@dataclass(frozen=True, slots=True)
class Selection:
    """The selected model (or None), the body bytes already read, and whether they are all of it.

    `source` says where the model came from ("json:model", "form:model", "query:model",
    "header"), for logs and analytics. When the body was not read (no body rule, or a control
    route) `prefix` is empty and `complete` is True only if the request has no body.
    """

    model: str | None
    prefix: bytes
    complete: bool
    source: str | None = None


class _MultiMapping(Protocol):
    def getall(self, key: str, default: list[str]) -> list[str]: ...


# ---- pure: query, headers ------------------------------------------------------------------


def _last(values: list[str], where: str) -> str | None:
    for value in reversed(values):
        model = check_model(value, where)
        if model is not None:
            return model
    return None


def select_from_query(query: _MultiMapping, names: Sequence[str]) -> tuple[str, str] | None:
    """(model, name) from the first query parameter name present; its last value wins."""
    for name in names:
        model = _last(query.getall(name, []), f"query parameter `{name}`")
        if model is not None:
            return model, name
    return None


def select_from_header(headers: _MultiMapping) -> str | None:
    return _last(headers.getall(SELECTOR_HEADER, []), f"header {SELECTOR_HEADER}")


def select_from_request_parts(
    rule: SelectorRule,
    body_model: tuple[str | None, str | None],
    query: _MultiMapping,
    headers: _MultiMapping,
) -> tuple[str | None, str | None]:
    """Apply the documented precedence: body, then query, then header."""
    if body_model[0] is not None:
        return body_model
    found = select_from_query(query, rule.query)
    if found is not None:
        return found[0], f"query:{found[1]}"
    if rule.header:
        model = select_from_header(headers)
        if model is not None:
            return model, "header"
    return None, None


# ---- I/O: the request body --------------------------------------------------------------------


async def _read_prefix(request: web.BaseRequest, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = await request.content.read(limit - total)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks), request.content.at_eof()


async def read_selector(request: web.BaseRequest, route: Route, scan_limit: int) -> Selection:
    """Read at most `scan_limit` body bytes (kept for replay) and find the model selector.

    The body is read only when the route's rule looks in it and the route has a forwarded or
    scanned body (not NONE, not CONTROL: control handlers parse their own small bodies).
    """
    _refuse_form_on_json(request, route)
    rule = route.selector
    prefix, complete = b"", not request.body_exists
    body_model: tuple[str | None, str | None] = (None, None)
    wants_body = rule.reads_body and route.body not in (BodyMode.NONE, BodyMode.CONTROL)
    if wants_body and request.body_exists and scan_limit > 0:
        prefix, complete = await _read_prefix(request, scan_limit)
        content_type = request.headers.get("Content-Type", "")
        body_model = select_from_body(prefix, complete, content_type, rule)
    model, source = select_from_request_parts(rule, body_model, request.query, request.headers)
    return Selection(model, prefix, complete, source)


FORM_TYPE = "application/x-www-form-urlencoded"


def _refuse_form_on_json(request: web.BaseRequest, route: Route) -> None:
    """A form-encoded body on a JSON route is a 415: it is what a cross-site HTML form sends,
    and no JSON API reads it. Ollama- and llama-server-style routes (`origin_strict`) take
    bodies of any content type, as those servers do."""
    if route.body is not BodyMode.JSON or route.origin_strict or not request.body_exists:
        return
    kind = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    if kind == FORM_TYPE:
        raise UnsupportedMediaType(
            f"{request.path} takes a JSON body: send it with Content-Type: application/json"
        )


async def body_stream(
    selection: Selection, request: web.BaseRequest, *, limit: int | None = None
) -> AsyncIterator[bytes]:
    """The exact request body: the kept prefix, then the rest as it arrives.

    `limit` caps the total; beyond it PayloadTooLarge is raised (for chunked bodies, whose size
    the edge cannot check up front).
    """
    sent = len(selection.prefix)
    if limit is not None and sent > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes")
    if selection.prefix:
        yield selection.prefix
    if selection.complete:
        return
    async for chunk in request.content.iter_any():
        sent += len(chunk)
        if limit is not None and sent > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        yield chunk


__all__ = [
    "SELECTOR_HEADER",
    "Selection",
    "body_stream",
    "read_selector",
    "select_from_header",
    "select_from_query",
    "select_from_request_parts",
]
