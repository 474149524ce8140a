"""Serve a router-minted video file: single byte ranges, nosniff, never a followed symlink.

Range rules (RFC 9110 section 14, reliability rows S13/S10): one satisfiable range -> 206 with
Content-Range; a range starting past the end -> 416; a header that does not parse, or asks for
several ranges (1,000 overlapping ones included), is ignored and the whole file is sent once,
so the bytes sent never exceed the file size.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
from pathlib import Path

from aiohttp import web

from router.errors import NotFound

CHUNK = 256 * 1024
_MAX_RANGE_HEADER = 256
_SPEC = re.compile(r"(\d{0,19})-(\d{0,19})")


class Unsatisfiable(Exception):
    pass


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) inclusive for one satisfiable range; None to send everything."""
    if not header or len(header) > _MAX_RANGE_HEADER:
        return None
    unit, sep, specs = header.partition("=")
    if not sep or unit.strip().lower() != "bytes" or "," in specs:
        return None
    found = _SPEC.fullmatch(specs.strip())
    if found is None or found.group(0) == "-":
        return None
    first, last = found.groups()
    if not first:  # suffix range: the final N bytes
        count = int(last)
        if count == 0 or size == 0:
            raise Unsatisfiable
        return max(0, size - count), size - 1
    start = int(first)
    if last and int(last) < start:
        return None  # syntactically invalid: ignored
    if start >= size:
        raise Unsatisfiable
    return start, min(int(last), size - 1) if last else size - 1


def _open_regular(path: Path) -> tuple[int, int]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        raise NotFound("file not found") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotFound("file not found")
    return fd, info.st_size


def _headers(filename: str, content_type: str) -> dict[str, str]:
    return {
        "Content-Type": content_type,
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Content-Disposition": f'inline; filename="{filename}"',
        "Accept-Ranges": "bytes",
        "Cache-Control": "no-cache",
    }


async def serve_file(
    request: web.Request, path: Path, filename: str, content_type: str = "video/mp4"
) -> web.StreamResponse:
    """`filename` is router-minted (a plain name), so it is safe in Content-Disposition."""
    fd, size = await asyncio.to_thread(_open_regular, path)
    try:
        headers = _headers(filename, content_type)
        try:
            wanted = parse_range(request.headers.get("Range"), size)
        except Unsatisfiable:
            headers["Content-Range"] = f"bytes */{size}"
            return web.Response(status=416, headers=headers)
        start, end = wanted if wanted else (0, size - 1)
        response = web.StreamResponse(status=206 if wanted else 200, headers=headers)
        if wanted:
            response.headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        response.content_length = end - start + 1
        await response.prepare(request)
        if request.method != "HEAD":
            await _copy(fd, start, end + 1, response)
        await response.write_eof()
        return response
    finally:
        os.close(fd)


async def _copy(fd: int, start: int, stop: int, response: web.StreamResponse) -> None:
    offset = start
    while offset < stop:
        chunk = await asyncio.to_thread(os.pread, fd, min(CHUNK, stop - offset), offset)
        if not chunk:
            break  # the file shrank; the client sees a short body, not wrong bytes
        await response.write(chunk)
        offset += len(chunk)
