"""`errors.error_body` renders a backend's own error in that backend's shape on its surface:
sd-server's `{"error": "job not found"}` for an unknown job on /sdcpp (its clients read a
string), the router's shape for every other error there and for the same error elsewhere."""

from __future__ import annotations

import pytest

from router.domain import Surface
from router.errors import BadRequest, JobNotFound, NotFound, error_body, render


def test_sd_servers_job_not_found_is_its_own_shape_on_the_sdcpp_surface() -> None:
    assert error_body(JobNotFound(), Surface.SDCPP) == {"error": "job not found"}
    response = render(JobNotFound(), Surface.SDCPP)
    assert response.status == 404 and response.body == b'{"error": "job not found"}'


@pytest.mark.parametrize("err", [BadRequest("no model"), NotFound("job not found")])
def test_the_routers_own_errors_on_sdcpp_keep_the_routers_shape(err: Exception) -> None:
    assert isinstance(err, BadRequest | NotFound)
    body = error_body(err, Surface.SDCPP)
    assert body["error"]["message"] == err.message and body["error"]["type"]


@pytest.mark.parametrize("surface", [Surface.OPENAI, Surface.A1111, Surface.SITE])
def test_a_native_error_elsewhere_takes_that_surfaces_shape(surface: Surface) -> None:
    body = error_body(JobNotFound(), surface)
    assert (
        body["error"]["message"] == "job not found" and body["error"]["type"] == "not_found_error"
    )
