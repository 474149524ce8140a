"""`ClusterService.register`: a master takes a slave's registration in one call (the registry,
the merged model list, then whoever follows a registration, such as lending's push)."""

from __future__ import annotations

import pytest

from router.cluster import (
    AllowList,
    ClusterService,
    NodeClient,
)
from router.config.schema import ClusterSection
from router.errors import ClusterError
from tests.support.snapshots import model, snap


def master() -> ClusterService:
    section = ClusterSection(
        role="master",
        node_id="m",
        token="t" * 32,
        public_url="http://master:8080",
        slave_urls=("http://a:8080",),
    )
    client = NodeClient(None, "", AllowList([]), 10.0)  # type: ignore[arg-type]  # never called
    return ClusterService(section, client, tuple, lambda _: None)


async def test_register_fills_the_registry_rebuilds_the_list_then_tells_each_follower() -> None:
    service = master()
    heard: list[tuple[str, str, bool]] = []
    # Each follower sees the registry already holding the node.
    for name in ("first", "second"):
        service.on_registered.append(
            lambda node_id, name=name: heard.append(
                (name, node_id, service.registry.node(node_id) is not None)
            )
        )
    service.register(snap("a", "http://a:8080", model("x")), now=5.0)
    assert heard == [("first", "a", True), ("second", "a", True)]
    assert service._rebuild is not None
    await service._rebuild
    assert [m.public_id for m in service.public_models()] == ["x"]


async def test_a_refused_registration_tells_nobody() -> None:
    service = master()
    heard: list[str] = []
    service.on_registered.append(heard.append)
    with pytest.raises(ClusterError):
        service.register(snap("z", "http://z:8080"), now=5.0)
    assert heard == [] and service.registry.nodes() == []
