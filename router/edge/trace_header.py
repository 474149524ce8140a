"""`X-Trace-Id`: the trace an answer belongs to, when traces are on (docs/observability.md).

The pipeline notes the trace id of its server span on the request; the app's response-prepare
hook puts it on the answer, so a streamed answer carries it with its headers, before the first
chunk. With traces off nothing is noted and no header is sent.
"""

from __future__ import annotations

from aiohttp import web

HEADER = "X-Trace-Id"
TRACE_ID: web.RequestKey[str] = web.RequestKey("trace_id", str)


def note(request: web.Request, trace_id: str | None) -> None:
    if trace_id is not None:
        request[TRACE_ID] = trace_id


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    trace_id = request.get(TRACE_ID)
    if trace_id is not None:
        response.headers[HEADER] = trace_id
