"""The pure download decisions: names (S21), where requests may go (S22), plans, bodies."""

from __future__ import annotations

import ipaddress

import pytest

from router.downloads.names import UnsafeName, check_repo_id, check_revision, path_problem
from router.downloads.plan import Present, RepoFile, Repository, choose, make_plan, split_listing
from router.downloads.queries import search_query
from router.downloads.ssrf import (
    MAX_REDIRECTS,
    Policy,
    literal_address,
    next_hop,
    origin_of,
    refusal,
)
from router.errors import BadRequest

ip = ipaddress.ip_address
PUBLIC = Policy.for_endpoint("https://huggingface.co", [ip("18.1.2.3")])
LOOPBACK = Policy.for_endpoint("http://127.0.0.1:9000", [ip("127.0.0.1")])


@pytest.mark.parametrize(
    "path",
    [
        "../x",
        "a/../b",
        "/abs",
        "C:/x",
        "a\\b",
        "a//b",
        "./a",
        "a/.",
        "x\ny",
        "x\u202ey",
        "",
        ".staging/a",
        "a" * 2000,
    ],
)
def test_s21_unsafe_paths_have_a_reason(path: str) -> None:
    assert path_problem(path) is not None


@pytest.mark.parametrize(
    "path", ["model.gguf", "weights/a-b_c.Q4_K_M.gguf", ".gitattributes", "a/b/c.json"]
)
def test_plain_paths_pass(path: str) -> None:
    assert path_problem(path) is None


def test_s21_repository_and_revision_names() -> None:
    assert check_repo_id("acme/tiny-1.5B") == "acme/tiny-1.5B"
    for bad in ("../x", "a/b/c", "a/..", "a /b", "", "/a", 3):
        with pytest.raises(UnsafeName):
            check_repo_id(bad)
    assert check_revision(None) is None and check_revision("refs/pr/1") == "refs/pr/1"
    for bad in ("../main", "a\x00", "/x"):
        with pytest.raises(UnsafeName):
            check_revision(bad)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/x",
        "http://[::1]/x",
        "http://169.254.169.254/",
        "https://10.0.0.1/",
        "https://192.168.1.1/",
        "https://172.16.0.1/",
        "https://[fd00::1]/",
        "https://[::ffff:127.0.0.1]/",
        "https://100.64.0.1/",
        "https://0.0.0.0/",
        "file:///etc/passwd",
        "ftp://x.org/",
    ],
)
def test_s22_special_addresses_are_refused_behind_a_public_endpoint(url: str) -> None:
    literal = literal_address(origin_of(url).host)
    addresses = [literal] if literal is not None else [ip("8.8.8.8")]
    assert refusal(url, addresses, PUBLIC) is not None


def test_s22_a_public_name_resolving_private_is_refused() -> None:
    assert refusal("https://cdn.example/x", [ip("8.8.8.8"), ip("10.0.0.5")], PUBLIC)
    assert refusal("https://cdn.example/x", [], PUBLIC)  # no answer: refused, not tried
    assert refusal("https://cdn.example/x", [ip("8.8.8.8")], PUBLIC) is None
    assert refusal("http://cdn.example/x", [ip("8.8.8.8")], PUBLIC)  # plain http off loopback


def test_s22_a_loopback_endpoint_opens_loopback_only() -> None:
    assert refusal("http://127.0.0.1:9001/blob", [ip("127.0.0.1")], LOOPBACK) is None
    assert refusal("http://10.0.0.1/", [ip("10.0.0.1")], LOOPBACK)
    assert refusal("http://169.254.169.254/", [ip("169.254.169.254")], LOOPBACK)


def test_redirects_keep_the_token_only_on_the_endpoint() -> None:
    endpoint = origin_of("https://huggingface.co")
    assert next_hop("https://huggingface.co/a", "/b", endpoint, 0).keep_authorization
    assert not next_hop(
        "https://huggingface.co/a", "https://cdn.hf.co/b", endpoint, 0
    ).keep_authorization
    assert not next_hop(
        "https://huggingface.co/a", "http://huggingface.co/b", endpoint, 0
    ).keep_authorization
    with pytest.raises(ValueError):
        next_hop("https://huggingface.co/a", "/b", endpoint, MAX_REDIRECTS)


def _repo() -> Repository:
    files, refused = split_listing(
        [
            ("a.gguf", 10, "ab" * 32, None),
            ("b.gguf", 20, None, "c" * 40),
            (".gitattributes", 1, None, None),
            ("../evil", 1, None, None),
        ]
    )
    return Repository("acme/x", "f" * 40, files, refused)


def test_choose_patterns_and_refused_names() -> None:
    repo = _repo()
    assert [f.path for f in choose(repo, [], "smart")] == ["a.gguf", "b.gguf"]
    assert [f.path for f in choose(repo, ["*.gguf"], "explicit")] == ["a.gguf", "b.gguf"]
    for bad in (["../evil"], ["missing.gguf"], ["*.bin"], [3]):
        with pytest.raises(UnsafeName):
            choose(repo, bad, "explicit")
    with pytest.raises(UnsafeName):
        choose(repo, [], "explicit")


def test_plan_space_replacements_and_skips() -> None:
    repo = _repo()
    chosen = choose(repo, ["*.gguf"], "explicit")
    same = {"a.gguf": Present(10, "ab" * 32, "0" * 40)}
    plan = make_plan(
        repo, None, chosen, same, free_bytes=100, reserve_bytes=50, access="not_required"
    )
    assert [f.path for f in plan.files] == ["b.gguf"] and plan.skipped == ("a.gguf",)
    assert plan.fits and plan.blockers(confirm_replace=False, confirm_unsafe=False) == []
    other = {"b.gguf": Present(20, "00" * 32, "0" * 40)}
    plan = make_plan(repo, None, chosen, other, free_bytes=35, reserve_bytes=10, access="denied")
    assert plan.replacements == ("b.gguf",) and not plan.fits
    assert len(plan.blockers(confirm_replace=False, confirm_unsafe=False)) == 3
    assert len(plan.blockers(confirm_replace=True, confirm_unsafe=False)) == 2
    assert RepoFile("x", 1).verify == "size"


def test_search_bodies() -> None:
    q = search_query({"query": "llama", "filters": ["gguf"], "sort": "downloads", "limit": 5})
    assert q == {
        "search": "llama",
        "filter": ["gguf"],
        "sort": "downloads",
        "limit": 5,
        "offset": 0,
    }
    for bad in (
        {"limit": 0},
        {"limit": 101},
        {"sort": "x"},
        {"unknown": 1},
        {"filters": "gguf"},
        {"gated": "yes"},
        {"direction": 1},
        {"cursor": "@@"},
    ):
        with pytest.raises(BadRequest):
            search_query(bad)
