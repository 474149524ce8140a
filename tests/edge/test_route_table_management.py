"""The management routes are rows of the route table (issue 22): each action has its own row,
so an unknown sub-path is the table's 404 and a wrong method its 405 with `Allow`, in the
site (or node) error shape, on a real app. The node's copies answer at the contract's own paths
(`/router/v1/node/store/download`, ...) and, for one release, at their `node/site/...` alias."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from router.app import create_app
from router.appkeys import SHUTDOWN
from router.classify import (
    NODE_CONTRACT_PATHS,
    ROUTES,
    management_path,
    match,
    node_path,
)
from router.config import Settings
from router.domain import Role
from router.errors import MethodNotAllowed, RouteNotFound

ADMIN_KEY = "admin-key-for-route-table-tests-0123"
TOKEN = "cluster-token-for-route-table-tests-01"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
NODE = {"Authorization": f"Bearer {TOKEN}"}

# Sub-paths the former `{tail:.+}` catch-alls took and their handlers refused one by one.
UNKNOWN = [
    "/router/v1/site/download/nope",
    "/router/v1/site/download/jobs/j1/nope",
    "/router/v1/site/download/jobs/j1/events/more",
    "/router/v1/site/webuis/list",
    "/router/v1/site/cook/a/b",
    "/router/v1/site/config-file/a/b",
    "/router/v1/site/model-files/list",
    "/router/v1/site/model-files/hash/more",
    "/router/v1/site/model-assets/jobs/j1/more",
    "/router/v1/site/model-assets/a/b",
    "/router/v1/node/nope",
    "/router/v1/node/site/nope",
    "/router/v1/node/load-captures/1/output/more",
]

# (method, path, Allow): a known path asked with a method its rows do not declare.
WRONG_METHOD = [
    ("POST", "/router/v1/site/download", "GET, HEAD"),
    ("GET", "/router/v1/site/download/search", "POST"),
    ("DELETE", "/router/v1/site/download/jobs/j1", "GET, HEAD"),
    ("GET", "/router/v1/site/download/jobs/j1/cancel", "POST"),
    ("POST", "/router/v1/site/webuis", "GET, HEAD"),
    ("GET", "/router/v1/site/webuis/session", "POST"),
    ("GET", "/router/v1/site/cook/apply", "POST"),
    ("PUT", "/router/v1/site/cook/c1", "DELETE"),
    ("GET", "/router/v1/site/config-file", "DELETE"),
    ("DELETE", "/router/v1/site/config-file/preview", "POST"),
    ("PUT", "/router/v1/site/config-file/base", "GET, HEAD"),
    ("GET", "/router/v1/site/model-files/hash", "POST"),
    ("GET", "/router/v1/site/model-assets/export", "POST"),
    ("GET", "/router/v1/site/model-assets/jobs", "POST"),
    ("POST", "/router/v1/site/model-assets/jobs/j1", "GET, HEAD"),
    ("DELETE", "/router/v1/site/model-assets/" + "a" * 64, "GET, HEAD"),
    ("POST", "/router/v1/node/models", "GET, HEAD"),
    ("GET", "/router/v1/node/register", "POST"),
    ("PUT", "/router/v1/node/offload/settings", "GET, HEAD, POST"),
    ("POST", "/router/v1/node/store/download", "GET, HEAD"),
    ("POST", "/router/v1/node/site/store/download", "GET, HEAD"),
    ("PUT", "/router/v1/node/load-errors", "DELETE, GET, HEAD"),
    ("GET", "/router/v1/node/analytics/flush", "POST"),
]


# ---- the table (pure) ------------------------------------------------------------------------


@pytest.mark.parametrize("path", UNKNOWN)
def test_an_unknown_management_sub_path_is_the_tables_404(path: str) -> None:
    with pytest.raises(RouteNotFound):
        match("GET", path)


@pytest.mark.parametrize(("method", "path", "allow"), WRONG_METHOD)
def test_a_wrong_method_is_the_tables_405(method: str, path: str, allow: str) -> None:
    with pytest.raises(MethodNotAllowed) as info:
        match(method, path)
    assert info.value.headers["Allow"] == allow


def test_no_management_route_is_a_catch_all() -> None:
    """Only the relayed client request keeps a `.+` parameter under /router/v1/."""
    rest = {
        r.template for r in ROUTES if r.template.startswith("/router/v1/") and ".+" in r.template
    }
    assert rest == {"/router/v1/node/inference/{path:.+}"}


def test_every_management_row_has_a_node_copy_at_its_node_path() -> None:
    for route in ROUTES:
        if not route.template.startswith(("/router/v1/site/", "/router/v1/benchmarks")):
            continue
        for template in {node_path(route.template), "/router/v1/node/" + route.template[11:]}:
            copies = [r for r in ROUTES if r.template == template and r.methods == route.methods]
            assert len(copies) == 1, template
            assert copies[0].role is Role.CLUSTER and copies[0].handler == "node.site"


@pytest.mark.parametrize(
    ("site", "node"),
    [
        (
            "/router/v1/site/nodes/backends/launch-options",
            "/router/v1/node/backends/launch-options",
        ),
        ("/router/v1/site/analytics/flush", "/router/v1/node/analytics/flush"),
        ("/router/v1/site/store/download", "/router/v1/node/store/download"),
        ("/router/v1/site/load-errors", "/router/v1/node/load-errors"),
        ("/router/v1/site/load-captures", "/router/v1/node/load-captures"),
        ("/router/v1/site/load-captures/7/output", "/router/v1/node/load-captures/7/output"),
        ("/router/v1/site/analytics", "/router/v1/node/site/analytics"),
        ("/router/v1/site/load-errorsx", "/router/v1/node/site/load-errorsx"),
        ("/router/v1/benchmarks/run", "/router/v1/node/benchmarks/run"),
    ],
)
def test_the_master_calls_the_contracts_node_path(site: str, node: str) -> None:
    assert node_path(site) == node
    assert management_path(node) == site


_MANAGEMENT = [
    r.template
    for r in ROUTES
    if r.template.startswith(("/router/v1/site/", "/router/v1/benchmarks"))
]


def test_node_path_and_management_path_are_inverse_on_every_row() -> None:
    for template in _MANAGEMENT:
        assert management_path(node_path(template)) == template
        assert (
            management_path("/router/v1/node/" + template.removeprefix("/router/v1/")) == template
        )


@given(st.sampled_from(_MANAGEMENT), st.text("abc/-", max_size=12))
def test_node_path_and_management_path_are_inverse_below_a_row(template: str, tail: str) -> None:
    path = template + "/" + tail
    assert management_path(node_path(path)) == path


def test_the_contract_pairs_are_distinct_prefixes() -> None:
    news = [new for _, new in NODE_CONTRACT_PATHS]
    assert len(set(news)) == len(news) and not any(n.startswith("site/") for n in news)


# ---- on a real app ---------------------------------------------------------------------------


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient]:
    (tmp_path / "kcpps").mkdir()
    settings = Settings.model_validate(
        {
            "models": {"config_dir": tmp_path / "kcpps"},
            "auth": {"admin_keys": [ADMIN_KEY]},
            "cluster": {"token": TOKEN},
            "analytics": {"database_path": tmp_path / "data" / "router.sqlite"},
            "downloads": {"enabled": False},
        }
    )
    app = create_app(settings)
    app[SHUTDOWN] = lambda: None
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client


def _is_error_shape(body: dict[str, object]) -> bool:
    error = body.get("error")
    return isinstance(error, dict) and {"message", "type", "param", "code"} <= error.keys()


@pytest.mark.parametrize("path", UNKNOWN)
async def test_unknown_sub_paths_answer_404_in_the_error_shape(
    client: TestClient, path: str
) -> None:
    headers = NODE if path.startswith("/router/v1/node/") else ADMIN
    async with client.get(path, headers=headers) as response:
        assert response.status == 404
        assert _is_error_shape(await response.json())


@pytest.mark.parametrize(("method", "path", "allow"), WRONG_METHOD)
async def test_wrong_methods_answer_405_with_allow(
    client: TestClient, method: str, path: str, allow: str
) -> None:
    headers = NODE if path.startswith("/router/v1/node/") else ADMIN
    async with client.request(method, path, headers=headers, data=b"") as response:
        assert response.status == 405
        assert response.headers["Allow"] == allow
        body = await response.json()
        assert _is_error_shape(body) and body["error"]["type"]


@pytest.mark.parametrize("prefix", ["/router/v1/node/", "/router/v1/node/site/"])
async def test_the_node_serves_the_contract_paths_and_their_aliases(
    client: TestClient, prefix: str
) -> None:
    async with client.get(prefix + "store/download", headers=NODE) as response:
        assert response.status == 200
        assert (await response.read()).startswith(b"SQLite format 3")
    async with client.post(prefix + "analytics/flush", headers=NODE, json={}) as response:
        assert response.status == 200 and "persisted" in await response.json()
    async with client.delete(prefix + "load-errors", headers=NODE) as response:
        assert response.status == 200 and (await response.json())["removed"] == 0
    async with client.get(prefix + "load-errors", headers=NODE) as response:
        assert response.status == 200 and (await response.json())["errors"] == []
    async with client.get(prefix + "load-captures", headers=NODE) as response:
        assert response.status == 200 and (await response.json())["captures"] == []
    async with client.get(prefix + "load-captures/12345", headers=NODE) as response:
        assert response.status == 404  # the handler's: no such capture on this node
        assert "capture" in (await response.json())["error"]["message"]
    launch = prefix + ("backends/" if prefix.endswith("node/") else "nodes/backends/")
    async with client.get(launch + "launch-options?backend_id=vllm", headers=NODE) as response:
        assert response.status == 200, await response.text()


async def test_node_paths_take_the_cluster_token_and_site_paths_the_admin_key(
    client: TestClient,
) -> None:
    async with client.get("/router/v1/node/store/download", headers=ADMIN) as response:
        assert response.status in (401, 403)
    async with client.get("/router/v1/site/store/download", headers=NODE) as response:
        assert response.status in (401, 403)
    async with client.get("/router/v1/site/store/download", headers=ADMIN) as response:
        assert response.status == 200


async def test_each_former_catch_all_action_is_reached(client: TestClient) -> None:
    """A sample of the new rows reaches its own handler (not a 404/405 from a tail router)."""
    async with client.get("/router/v1/site/download", headers=ADMIN) as response:
        assert response.status == 200 and (await response.json())["nodes"][0]["capability"]
    async with client.post("/router/v1/site/download/search", headers=ADMIN, json={}) as response:
        assert response.status == 503  # downloads are off: the handler's own answer
    async with client.get("/router/v1/site/webuis", headers=ADMIN) as response:
        assert response.status == 200 and (await response.json())["object"] == "list"
    async with client.get("/router/v1/site/config-file/nope", headers=ADMIN) as response:
        assert (
            response.status == 404 and "nope.kcpps" in (await response.json())["error"]["message"]
        )
    async with client.delete("/router/v1/site/cook/nope", headers=ADMIN, json={}) as response:
        assert (
            response.status == 404 and "nope.kcpps" in (await response.json())["error"]["message"]
        )
    sha = "0" * 64
    async with client.get(f"/router/v1/site/model-assets/{sha}", headers=ADMIN) as response:
        assert response.status == 200 and (await response.json())["available"] is False
    async with client.get("/router/v1/site/model-assets/jobs/j1", headers=ADMIN) as response:
        assert response.status in (404, 503)
    async with client.get("/router/v1/node/site/webuis", headers=NODE) as response:
        assert response.status == 200 and (await response.json())["object"] == "list"
