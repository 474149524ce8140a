"""Helpers shared by the image, voice and music handlers (router/api/images.py, voice.py).

- Which configuration a media request goes to: the one it names, else the lane's active
  runtime, else the only configuration serving the lane (the rule docs/decisions.md states for
  every route without a selector).
- multipart/form-data parsing and building for bodies the router holds in full (at most
  `limits.selector_scan_mb`), so audio can be converted and form fields set or replaced.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from aiohttp import web

from router.appkeys import CATALOG, RUNTIMES
from router.domain import Lane
from router.errors import BadRequest, ModelNotFound
from router.kcpps import ModelConfig
from router.runtime_state import Runtime, RuntimeState

_LIVE = (RuntimeState.LOADING, RuntimeState.READY)


def active_runtime(app: web.Application, lane: Lane) -> Runtime | None:
    """The runtime loading or serving `lane` now (never starts one)."""
    for runtime in app[RUNTIMES].runtimes():
        if lane in runtime.spec.occupies and runtime.state in _LIVE and not runtime.draining:
            return runtime
    return None


def public_id(config: ModelConfig, lane: Lane) -> str:
    """The ID clients use for `config` on `lane` (image lanes have their own IDs)."""
    return config.image_id if lane is Lane.IMAGE and config.image_id else config.id


def resolve_for_lane(app: web.Application, model: str, lane: Lane) -> ModelConfig:
    config = app[CATALOG].resolve(model)
    if config is None:
        raise ModelNotFound(model)
    if lane not in config.lanes:
        raise BadRequest(f"model {model!r} has no {lane} component", param="model")
    return config


def choose_config(app: web.Application, model: str | None, lane: Lane) -> ModelConfig:
    """The named model, else the lane's active runtime, else the only config serving it."""
    if model is not None:
        return resolve_for_lane(app, model, lane)
    runtime = active_runtime(app, lane)
    if runtime is not None:
        return runtime.config  # type: ignore[no-any-return]
    candidates = [c for c in app[CATALOG].configs() if lane in c.lanes]
    if len(candidates) == 1:
        return candidates[0]
    names = ", ".join(public_id(c, lane) for c in candidates) or "(none configured)"
    raise BadRequest(
        f'name a model with a "model" field, ?model= or the X-Tensors-Model header; '
        f"{lane} models: {names}",
        param="model",
    )


# ---- multipart/form-data ------------------------------------------------------------------


@dataclass
class FormPart:
    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None
    extra_headers: list[bytes] = field(default_factory=list)


_NAME = re.compile(r';\s*name\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]+))', re.IGNORECASE)
_FILENAME = re.compile(r';\s*filename\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]+))', re.IGNORECASE)
_UNSAFE_NAME = re.compile(r'["\r\n\\]')


def _param(pattern: re.Pattern[str], line: str) -> str | None:
    m = pattern.search(line)
    if m is None:
        return None
    return m.group(1) if m.group(1) is not None else m.group(2)


def _disposition(line: str) -> tuple[str | None, str | None]:
    filename = _param(_FILENAME, line)
    if filename is None and "filename*" in line.lower():
        filename = "audio"  # RFC 5987 names: the name itself never matters to a backend
    return _param(_NAME, line), filename


def _parse_headers(raw: bytes) -> tuple[str | None, str | None, str | None, list[bytes]]:
    name = filename = ctype = None
    extra: list[bytes] = []
    for line in raw.split(b"\r\n"):
        key, _, value = line.partition(b":")
        low = key.strip().lower()
        if low == b"content-disposition":
            name, filename = _disposition(value.decode("latin-1"))
        elif low == b"content-type":
            ctype = value.decode("latin-1").strip()
        elif line.strip():
            extra.append(line)
    return name, filename, ctype, extra


def part_name(raw_headers: bytes) -> str | None:
    """The form field name in a part's raw headers."""
    return _parse_headers(raw_headers)[0]


def part_spans(body: bytes, boundary: str) -> list[tuple[bytes, int, int]]:
    """(raw part headers, data start, data end or -1 when the part runs past `body`)."""
    delim = b"--" + boundary.encode("latin-1")
    spans: list[tuple[bytes, int, int]] = []
    pos = body.find(delim)
    while pos >= 0:
        pos += len(delim)
        if body[pos : pos + 2] == b"--":
            break
        head_end = body.find(b"\r\n\r\n", pos)
        if head_end < 0:
            break
        start = head_end + 4
        end = body.find(b"\r\n" + delim, start)
        spans.append((body[pos:head_end].strip(b"\r\n"), start, end))
        if end < 0:
            break
        pos = end + 2
    return spans


def parse_form(body: bytes, boundary: str) -> list[FormPart]:
    """Every part of a complete multipart body; BadRequest when it is not one."""
    parts = []
    for raw, start, end in part_spans(body, boundary):
        name, filename, ctype, extra = _parse_headers(raw)
        if end < 0 or name is None:
            raise BadRequest("malformed multipart/form-data body")
        parts.append(FormPart(name, body[start:end], filename, ctype, extra))
    if not parts:
        raise BadRequest("malformed multipart/form-data body: no parts")
    return parts


def field_part(name: str, value: str) -> bytes:
    """One plain form field, encoded as a part (without the leading delimiter)."""
    return f'Content-Disposition: form-data; name="{name}"\r\n\r\n{value}'.encode()


def build_form(parts: list[FormPart]) -> tuple[bytes, str]:
    """(body, Content-Type) for `parts` under a fresh boundary."""
    boundary = "tensor-router-" + secrets.token_hex(12)
    delim = b"--" + boundary.encode()
    out = []
    for part in parts:
        disp = f'form-data; name="{part.name}"'
        if part.filename is not None:
            disp += f'; filename="{_UNSAFE_NAME.sub("_", part.filename)}"'
        head = [f"Content-Disposition: {disp}".encode()]
        if part.content_type:
            head.append(f"Content-Type: {part.content_type}".encode())
        out.append(delim + b"\r\n" + b"\r\n".join(head + part.extra_headers) + b"\r\n\r\n")
        out.append(part.data + b"\r\n")
    out.append(delim + b"--\r\n")
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


__all__ = [
    "FormPart",
    "active_runtime",
    "build_form",
    "choose_config",
    "field_part",
    "parse_form",
    "part_name",
    "part_spans",
    "public_id",
    "resolve_for_lane",
]
