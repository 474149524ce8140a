"""One exception hierarchy, translated at the edge by one renderer per API family.

Handlers and middlewares raise `RouterError` subclasses; the `edge_errors` middleware (edge) is
the one caller of `render(err, surface, secrets)`, which turns them into the surface's own error
shape and HTTP status (spec/inference-server-api.md, "Errors"). Messages never carry absolute
paths or keys: `sanitize()` runs on every rendered message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web

from router.domain import Surface

MAX_MESSAGE_BYTES = 512

# Absolute POSIX paths and Windows drive paths; the file name alone stays (it helps the user).
_ABS_PATH = re.compile(
    r"(?<![\w.:/])(?:/[^\s/'\"`]+)+/([^\s/'\"`]*)|[A-Za-z]:\\(?:[^\s\\'\"]+\\)*([^\s\\'\"]*)"
)


class RouterError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None
    # The backend's own answer, which its clients parse: rendered in that backend's shape on
    # its surface (error_body), in the router's everywhere else.
    native = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        close: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.param = param
        self.headers = dict(headers or {})
        # The connection cannot carry another request after this answer (an unread body).
        self.close = close


class BadRequest(RouterError):
    status, type = 400, "invalid_request_error"


class Unauthorized(RouterError):
    status, type = 401, "authentication_error"

    def __init__(self, message: str = "Invalid API Key", **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]


class Forbidden(RouterError):
    status, type = 403, "permission_error"


class NotFound(RouterError):
    status, type = 404, "not_found_error"


class JobNotFound(NotFound):
    """sd-server's 404 for a job id it does not hold: `{"error": "job not found"}` on /sdcpp."""

    native = True

    def __init__(self) -> None:
        super().__init__("job not found", param="job_id")


class Conflict(RouterError):
    """The request is well formed but this node's state refuses it (a file exists, a field
    does not resolve)."""

    status, type = 409, "conflict_error"


class ClusterError(RouterError):
    """A peer's cluster request this node refuses (an unknown URL, another protocol)."""

    status, type, code = 400, "cluster_error", "cluster_error"


class DuplicateNode(ClusterError):
    """A registration whose identity collides with a known node; the registry is unchanged."""

    status, code = 409, "duplicate_node"


class LeaseRefused(ClusterError):
    """A pooled-memory lease this node will not grant, renew or use (docs/cluster.md,
    "Pooled memory"): not in the cluster, another master, expired, no room, a bad port."""

    status, code = 409, "lease_refused"


class RouteNotFound(NotFound):
    def __init__(self, path: str = "") -> None:
        super().__init__("File Not Found" if not path else f"no route for {path}")


class ModelNotFound(NotFound):
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(f"model {json.dumps(model)} was not found")
        self.model = model


class MethodNotAllowed(RouterError):
    status, type = 405, "invalid_request_error"

    def __init__(self, method: str, allow: Iterable[str], surface: Surface | None = None) -> None:
        allowed = sorted(set(allow))
        super().__init__(
            f"method {method} is not allowed here; use {', '.join(allowed)}",
            headers={"Allow": ", ".join(allowed)},
        )
        self.allow = allowed
        self.surface = surface  # the path's own API, whose error shape the answer takes


class RequestTimeout(RouterError):
    status, type = 408, "invalid_request_error"


class PayloadTooLarge(RouterError):
    status, type = 413, "invalid_request_error"


class UnsupportedMediaType(RouterError):
    status, type = 415, "invalid_request_error"


class URITooLong(RouterError):
    status, type = 414, "invalid_request_error"


class HeadersTooLarge(RouterError):
    status, type = 431, "invalid_request_error"


class TooManyRequests(RouterError):
    status, type = 429, "rate_limit_error"


class InternalError(RouterError):
    status, type = 500, "server_error"


class NotImplementedRoute(RouterError):
    status, type = 501, "not_supported_error"


class BadGateway(RouterError):
    status, type = 502, "upstream_error"


class ServiceUnavailable(RouterError):
    status, type = 503, "unavailable_error"

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        if retry_after is not None:
            self.headers["Retry-After"] = str(max(1, int(retry_after + 0.999)))


class StoreUnavailable(ServiceUnavailable):
    """The SQLite store cannot be written or opened (a full or read-only disk); the message
    names the cause and the `analytics.database_path` setting, never the path itself (S25)."""

    code = "store_unavailable"


class GatewayTimeout(RouterError):
    status, type = 504, "timeout_error"


class LoadFailed(BadGateway):
    """A backend could not be started or did not become ready; `exit_code` and `output_tail`
    are what the load-errors table keeps."""

    code = "model_load_failed"

    def __init__(
        self,
        message: str,
        *,
        exit_code: int | None = None,
        output_tail: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.output_tail = output_tail


class BackendExited(LoadFailed):
    """The child exited before it was ready (a port taken under it is one reason)."""


# URL paths of the APIs the router speaks are advice to the client ("use /v1/embeddings"),
# not file system paths: they are kept.
_API_PREFIXES = (
    "/v1/", "/v2/", "/api/", "/sdapi/", "/sdcpp/", "/router/", "/upload/", "/history/",
    "/view", "/prompt", "/musicui", "/cohere/", "/completion", "/tokenize", "/detokenize",
    "/embedding", "/infill", "/props", "/slots", "/health", "/metrics", "/inference",
)  # fmt: skip


def _strip_dirs(match: re.Match[str]) -> str:
    whole = match.group(0)
    if whole.startswith(_API_PREFIXES):
        return whole
    return match.group(1) or match.group(2) or "[path]"


def sanitize(text: str, secrets: Iterable[str] = ()) -> str:
    """Drop directories from absolute paths and blank out secrets; cap at 512 bytes."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    text = _ABS_PATH.sub(_strip_dirs, text)
    raw = text.encode("utf-8", "replace")
    if len(raw) > MAX_MESSAGE_BYTES:
        text = raw[: MAX_MESSAGE_BYTES - 3].decode("utf-8", "ignore") + "..."
    return text


def error_body(err: RouterError, surface: Surface, secrets: Iterable[str] = ()) -> dict[str, Any]:
    message = sanitize(err.message, secrets)
    if surface is Surface.OLLAMA or (surface is Surface.SDCPP and err.native):
        return {"error": message}  # Ollama's shape; sd-server's own
    if surface is Surface.KOBOLD:
        return {"detail": {"msg": message, "type": err.type}}
    return {"error": {"message": message, "type": err.type, "param": err.param, "code": err.code}}


def render(err: RouterError, surface: Surface, secrets: Iterable[str] = ()) -> web.Response:
    """An error as the surface's HTTP response (called by `edge.errors.edge_errors` only)."""
    response = web.json_response(
        error_body(err, surface, secrets), status=err.status, headers=err.headers or None
    )
    if err.close:
        response.force_close()
    return response
