"""multipart/form-data parsing and building for bodies the router holds in full (at most
`limits.selector_scan_mb`), so audio can be converted and form fields set or replaced.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from router.errors import BadRequest


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
