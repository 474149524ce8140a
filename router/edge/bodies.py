"""Reading a whole body with a cap, on either leg (a client's request, a backend's answer)."""

from __future__ import annotations

from aiohttp import StreamReader

from router.errors import RouterError


async def read_capped_stream(
    stream: StreamReader, declared: int | None, cap: int, too_large: RouterError
) -> bytes:
    """Every byte to the end of the body, raising `too_large` once it passes `cap` bytes.

    Reads to the end: a body arrives in as many pieces as the network cuts it into, and
    `StreamReader.read(n)` answers only what is buffered so far. A declared length over the cap
    is refused before anything is read.
    """
    if declared is not None and declared > cap:
        raise too_large
    chunks, total = [], 0
    async for chunk in stream.iter_any():
        total += len(chunk)
        if total > cap:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)
