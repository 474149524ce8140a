"""Defects the schemathesis run over the description found, each pinned by a test.

- A decoded path holding a line feed (`%0A`) at a parameterised route passed the route table
  (a `{name}` segment is any run of non-'/' characters) but not aiohttp's catch-all
  `/{tail:.*}` ('.' stops at a newline), so aiohttp's own plain-text "404: Not Found" went out
  instead of the route's answer in the surface's shape.
"""

from __future__ import annotations

import pytest

from tests.support.harness import RouterHarness


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/models/a%0Ab", "openai"),
        ("/v1/models/a%0A", "openai"),
        ("/router/webuis/x%0Ay/z", "openai"),
        ("/sdapi/v1/a%0Ab", "openai"),
        ("/api/v1/generate%0A", "ollama"),  # no route: an /api/ path answers as Ollama
        ("/api/x%0A", "ollama"),
    ],
)
async def test_a_newline_in_the_path_is_answered_in_the_surface_shape(
    harness: RouterHarness, path: str, shape: str
) -> None:
    harness.model("chat-a")
    client = await harness.start()
    response = await client.get(path)
    assert response.status_code in (404, 405), response.text
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    if shape == "ollama":
        assert isinstance(body["error"], str)
    else:
        assert isinstance(body["error"]["message"], str)
