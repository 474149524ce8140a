"""The pure rules of scoped keys (router/keys): model lists and globs, the quota's reset at
UTC midnight, the checks of what an admin sends, and the book's constant-time match."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from router.classify import match
from router.config import Settings
from router.domain import Priority
from router.edge.auth import KeyRing, Policy, digest
from router.edge.request import caller_of
from router.errors import BadRequest, Forbidden, TooManyRequests, Unauthorized
from router.keys import KeyBook, ScopedKey, seconds_to_reset, spec_from
from tests.support.compare_spy import spy_compare_digest

MIDNIGHT = 1_780_000_000 - 1_780_000_000 % 86400  # a UTC midnight


def key(name: str = "agent", **fields: object) -> ScopedKey:
    return ScopedKey(name, digest(f"secret-{name}"), **fields)  # type: ignore[arg-type]


def test_models_by_id_and_glob() -> None:
    k = key(models=("qwen3-8b", "llama-*"))
    assert k.allows("qwen3-8b") and k.allows("llama-3b")
    assert not k.allows("qwen3-8b-q8") and not k.allows("mistral")
    assert key().allows("anything")  # no list: every model


def test_quota_resets_at_utc_midnight() -> None:
    assert seconds_to_reset(MIDNIGHT) == 86400
    assert seconds_to_reset(MIDNIGHT + 86400 - 10) == 10


def test_spec_checks_each_field() -> None:
    spec = spec_from(
        {"name": "a.b-c_1", "models": ["m*"], "priority": "batch", "daily_tokens": 5},
        creating=True,
    )
    assert spec == {
        "name": "a.b-c_1",
        "models": ("m*",),
        "priority": Priority.BATCH,
        "daily_tokens": 5,
    }
    for bad in (
        {"name": "-x"},
        {"name": "x", "priority": "urgent"},
        {"name": "x", "max_concurrent": 0},
        {"name": "x", "models": "m"},
        {"name": "x", "secret": "s"},
    ):
        with pytest.raises(BadRequest):
            spec_from(bad, creating=True)
    with pytest.raises(BadRequest):  # the name never changes
        spec_from({"name": "y"}, creating=False)


def test_admission_refuses_other_models_and_a_used_up_quota() -> None:
    book = KeyBook()
    k = key(models=("m1",), daily_tokens=100)
    book.load([k], {"agent": 60}, MIDNIGHT + 3600)
    book.admit(k, "m1", MIDNIGHT + 3600)
    with pytest.raises(Forbidden, match="'m2'"):
        book.admit(k, "m2", MIDNIGHT + 3600)
    with pytest.raises(Forbidden):
        book.admit(k, None, MIDNIGHT + 3600)
    book.charge("agent", 40, MIDNIGHT + 3600)
    with pytest.raises(TooManyRequests) as refused:
        book.admit(k, "m1", MIDNIGHT + 7200)
    assert refused.value.headers["Retry-After"] == str(86400 - 7200)
    book.admit(k, "m1", MIDNIGHT + 86400 + 1)  # the next UTC day starts from zero
    assert book.used("agent", MIDNIGHT + 86400 + 1) == 0


def test_match_compares_every_active_digest_whatever_matches(monkeypatch) -> None:
    book = KeyBook()
    keys = [key(f"k{i}") for i in range(5)] + [key("gone", revoked=1.0)]
    book.load(keys, {}, MIDNIGHT)
    calls = spy_compare_digest(monkeypatch)
    for probe, expected in (
        (digest("secret-k0"), "k0"),
        (digest("secret-k4"), "k4"),
        (digest("nope"), None),
        (digest("secret-gone"), None),
    ):
        calls.clear()
        found = book.match(probe)
        assert (found.name if found else None) == expected
        # All five live digests, every time: where (or whether) it matched changes nothing.
        assert sorted(stored for _, stored in calls) == sorted(k.digest for k in keys[:5])
        assert all(p == probe for p, _ in calls)


def test_auth_compares_every_configured_and_scoped_digest_whatever_matches(monkeypatch) -> None:
    """The policy as the middleware runs it: one pass over the router.yaml keys and one over
    the scoped keys, for a config key, a scoped key and an unknown one alike."""
    settings = Settings.model_validate(
        {"auth": {"inference_keys": ["inf-config-key-3c9d1e"], "admin_keys": ["adm-config-4f2a"]}}
    )
    book = KeyBook()
    keys = [key(f"k{i}") for i in range(3)]
    book.load(keys, {}, MIDNIGHT)
    ring = KeyRing.from_settings(settings)
    policy = Policy(ring, settings, None, book)
    route = match("POST", "/v1/chat/completions").route
    stored = sorted([d for d, _ in ring._entries] + [k.digest for k in keys])
    calls = spy_compare_digest(monkeypatch)
    for presented, caller in (("inf-config-key-3c9d1e", ""), ("secret-k1", "k1"), ("nope", None)):
        calls.clear()
        request = make_mocked_request(
            "POST", "/v1/chat/completions", headers={"Authorization": f"Bearer {presented}"}
        )
        if caller is None:
            with pytest.raises(Unauthorized):
                policy.check(request, route)
        else:
            policy.check(request, route)
            assert caller_of(request).name == caller
        assert sorted(b for _, b in calls) == stored
        assert {a for a, _ in calls} == {digest(presented)}
