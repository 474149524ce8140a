"""Addressing another node's inference route from an `Asked` (the method, URL and headers
taken once from the client's request): the path, the renamed selector, the headers kept."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request
from yarl import URL

from router.cluster import Asked, node_headers, node_path_qs
from router.forwarding import Selection


def test_asked_from_a_request_keeps_method_url_and_headers() -> None:
    request = make_mocked_request(
        "POST", "/v1/chat/completions?x=1", headers={"Accept": "application/json"}
    )
    asked = Asked.of(request)
    assert (asked.method, asked.path, str(asked.url)) == (
        "POST",
        "/v1/chat/completions",
        "/v1/chat/completions?x=1",
    )
    assert asked.headers["accept"] == "application/json"


def test_path_and_headers_for_the_node_route() -> None:
    headers = {"Accept": "text/event-stream", "Cookie": "s=1", "X-Request-Id": "r1"}
    asked = Asked("GET", URL("/sdapi/v1/options?model=public&y=2"), headers)
    by_query = Selection("public", b"", True, "query:model")
    path = node_path_qs(asked, by_query, "local-id")
    assert path == "/router/v1/node/inference/sdapi/v1/options?model=local-id&y=2"
    out = node_headers(asked, "tok", Selection("public", b"", True, "header"), "local-id")
    assert dict(out) == {
        "Accept": "text/event-stream",
        "X-Request-Id": "r1",
        "X-Tensors-Model": "local-id",
        "Authorization": "Bearer tok",
    }
