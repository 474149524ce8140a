"""The pure half of the model selector (router/forwarding/selector.py): the model a request
body or its prefix names (JSON, a JSON prefix, a multipart form field), and the check every
selector value passes wherever it was found.

Which parser runs depends on Content-Type (`body_kind`); a prefix is walked one top-level value
at a time so the rest of a large body is never parsed. No I/O here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from router.classify import SelectorRule
from router.errors import BadRequest

MAX_MODEL_BYTES = 512
_MAX_PART_HEADER_BYTES = 16 * 1024
_WS = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, pos: int = 0) -> int:
    """The index after the JSON white space at `pos` (the pattern matches the empty string)."""
    found = _WS.match(text, pos)
    return found.end() if found else pos


_DECODER = json.JSONDecoder()
_NAME_PARAM = re.compile(r';\s*name\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]+))', re.IGNORECASE)
_FILENAME_PARAM = re.compile(r";\s*filename\*?\s*=", re.IGNORECASE)
_BOUNDARY_PARAM = re.compile(r';\s*boundary\s*=\s*(?:"([^"]*)"|([^;\s]+))', re.IGNORECASE)
_BOUNDARY_OK = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")
_JSON_TYPES = frozenset({"application/json", "text/plain", "application/x-www-form-urlencoded", ""})


# ---- pure: values ---------------------------------------------------------------------------


# Control characters, DEL and lone surrogates: one regex scan, not a Python loop per character
# (every request's model name passes here).
_BAD_NAME_CHARS = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def check_model(value: Any, where: str) -> str | None:
    """A selector value as found -> a usable name, None when absent, or BadRequest."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{where} must be a string naming a model", param="model")
    if not value.strip():
        return None
    if len(value.encode("utf-8", "surrogatepass")) > MAX_MODEL_BYTES:
        raise BadRequest(f"{where} is longer than {MAX_MODEL_BYTES} bytes", param="model")
    if _BAD_NAME_CHARS.search(value):
        raise BadRequest(f"{where} contains control or invalid characters", param="model")
    return value


def _lookup(obj: dict[str, Any], keys: Sequence[str]) -> tuple[str, str] | None:
    """First key path (dotted) that names a model in `obj`: (model, key)."""
    for key in keys:
        value: Any = obj
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        model = check_model(value, f"`{key}`")
        if model is not None:
            return model, key
    return None


# ---- pure: JSON -----------------------------------------------------------------------------


def _decode_utf8(data: bytes, *, truncated: bool) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        # A prefix may end inside a multi-byte character; anything else is a bad body.
        if truncated and err.start >= len(data) - 3 and err.reason == "unexpected end of data":
            return data[: err.start].decode("utf-8")
        raise BadRequest(f"request body is not valid UTF-8 (byte {err.start})") from None


def _object_start(text: str) -> int | None:
    """Index after the opening '{', None for an empty body; BadRequest for any other value."""
    pos = _skip_ws(text)
    if pos == len(text):
        return None
    if text[pos] != "{":
        raise BadRequest("request body must be a JSON object")
    return pos + 1


def select_from_json(body: bytes, keys: Sequence[str]) -> str | None:
    """The model named by the first key path in `keys` found in a complete JSON body."""
    return _json_selection(body, keys)[0]


def _json_selection(body: bytes, keys: Sequence[str]) -> tuple[str | None, str | None]:
    text = _decode_utf8(body, truncated=False)
    if _object_start(text) is None:
        return None, None
    try:
        obj = json.loads(text)
    except RecursionError:
        raise BadRequest("request body JSON is nested too deeply") from None
    except json.JSONDecodeError as err:
        raise BadRequest(f"request body is not valid JSON: {err.msg} (char {err.pos})") from None
    except ValueError:  # an integer beyond Python's digit limit
        raise BadRequest("request body is not valid JSON: a number is too long") from None
    found = _lookup(obj, keys)
    return (found[0], found[1]) if found else (None, None)


def scan_json_prefix(prefix: bytes, keys: Sequence[str]) -> str | None:
    """The model in the top-level keys found within `prefix`, a leading part of a JSON object."""
    return _prefix_selection(prefix, keys)[0]


def _prefix_selection(prefix: bytes, keys: Sequence[str]) -> tuple[str | None, str | None]:
    text = _decode_utf8(prefix, truncated=True)
    pos = _object_start(text)
    if pos is None:
        return None, None
    heads = {key.split(".", 1)[0] for key in keys}
    seen: dict[str, Any] = {}  # later duplicates overwrite earlier ones, as json.loads would
    for name, value in _top_level_items(text, pos, heads):
        seen[name] = value
    found = _lookup(seen, keys)
    return (found[0], found[1]) if found else (None, None)


def _top_level_items(text: str, pos: int, wanted: set[str]) -> Iterable[tuple[str, Any]]:
    """Yield (key, value) for wanted top-level keys until the object ends or the text runs out.

    A value that does not decode (usually because the prefix cut it) ends the scan quietly.
    """
    end = len(text)
    while True:
        pos = _skip_ws(text, pos)
        if pos >= end or text[pos] == "}":
            return
        try:
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _skip_ws(text, pos)
            if not isinstance(key, str) or text[pos : pos + 1] != ":":
                return
            pos = _skip_ws(text, pos + 1)
            value, pos = _DECODER.raw_decode(text, pos)
        except RecursionError:
            raise BadRequest("request body JSON is nested too deeply") from None
        except (ValueError, IndexError):
            return
        if key in wanted:
            yield key, value
        pos = _skip_ws(text, pos)
        if text[pos : pos + 1] != ",":
            return
        pos += 1


# ---- pure: multipart ----------------------------------------------------------------------------


def boundary_of(content_type: str) -> str | None:
    """The multipart boundary parameter of a Content-Type, None if missing or malformed."""
    m = _BOUNDARY_PARAM.search(content_type)
    if m is None:
        return None
    boundary = m.group(1) if m.group(1) is not None else m.group(2)
    return boundary if _BOUNDARY_OK.fullmatch(boundary) else None


def _part_field(headers: bytes) -> str | None:
    """The form field name of a part that is a plain field (not a file upload)."""
    for line in headers.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() != b"content-disposition":
            continue
        text = value.decode("latin-1")
        m = _NAME_PARAM.search(text)
        if m is None or _FILENAME_PARAM.search(text):
            return None
        return m.group(1) if m.group(1) is not None else m.group(2)
    return None


def select_from_multipart(prefix: bytes, boundary: str, field: str = "model") -> str | None:
    """The value of the last complete, non-file form field `field` within `prefix`."""
    delim = b"--" + boundary.encode("ascii")
    found: str | None = None
    pos = prefix.find(delim)
    while pos >= 0:
        pos += len(delim)
        if prefix[pos : pos + 2] == b"--":
            break  # closing delimiter
        head_end = prefix.find(b"\r\n\r\n", pos, pos + _MAX_PART_HEADER_BYTES)
        if head_end < 0:
            break
        next_delim = prefix.find(b"\r\n" + delim, head_end + 4)
        if next_delim < 0:
            break  # this part runs past the prefix
        if _part_field(prefix[pos:head_end]) == field:
            raw = prefix[head_end + 4 : next_delim]
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest(f"form field `{field}` is not valid UTF-8") from None
            found = check_model(value, f"form field `{field}`") or found
        pos = next_delim + 2
    return found


def body_kind(content_type: str) -> str:
    """'multipart', 'json' (declared, or a type JSON clients commonly send) or 'sniff'.

    Ollama and llama-server clients send JSON as text/plain, form-urlencoded (curl -d) or with no
    Content-Type, so those are held to JSON's rules. Other types (octet-stream, audio, images)
    are sniffed: a body that starts like a JSON object is held to JSON's rules, others are left
    alone (raw audio, images).
    """
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime == "multipart/form-data":
        return "multipart"
    if mime in _JSON_TYPES or mime.endswith("+json"):
        return "json"
    return "sniff"


def select_from_body(
    data: bytes, complete: bool, content_type: str, rule: SelectorRule
) -> tuple[str | None, str | None]:
    """(model, source) from a body or its prefix, per the rule and the Content-Type."""
    kind = body_kind(content_type)
    if kind == "multipart":
        if not rule.multipart_field:
            return None, None
        boundary = boundary_of(content_type)
        if boundary is None:
            raise BadRequest("multipart body without a valid boundary parameter")
        model = select_from_multipart(data, boundary, rule.multipart_field)
        return model, f"form:{rule.multipart_field}" if model else None
    if not rule.json_keys:
        return None, None
    if kind == "sniff" and not data.lstrip(b" \t\r\n").startswith(b"{"):
        return None, None
    scan = _json_selection if complete else _prefix_selection
    model, key = scan(data, rule.json_keys)
    return model, f"json:{key}" if model else None
