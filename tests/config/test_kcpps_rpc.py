"""`router_rpc_nodes` and KoboldCpp's own RPC keys in a `.kcpps` (docs/kcpps.md, "RPC
keys"): lending nodes are named by ID, never by address, and no address in a file reaches a
backend's argv."""

from __future__ import annotations

from typing import Any

import pytest

from tests.config.test_kcpps import parse, refused

MODEL = {"model_param": "big.gguf"}


def test_router_rpc_nodes_takes_auto_or_node_ids() -> None:
    assert parse(MODEL).rpc_nodes is None
    assert parse({**MODEL, "router_rpc_nodes": "auto"}).rpc_nodes == "auto"
    nodes = parse({**MODEL, "router_rpc_nodes": ["box-b", "box-c"]}).rpc_nodes
    assert nodes == ("box-b", "box-c")


@pytest.mark.parametrize(
    ("value", "word"),
    [
        (["10.0.0.5:50052"], "no node ID"),
        (["box-b", "box-b"], "twice"),
        ("box-b", "auto or a list"),
        ([1], "no node ID"),
        (["x"] * 17, "at most 16"),
    ],
)
def test_router_rpc_nodes_refuses_addresses_and_bad_lists(value: Any, word: str) -> None:
    refused({**MODEL, "router_rpc_nodes": value}, "router_rpc_nodes", word)


@pytest.mark.parametrize(
    ("key", "value", "word"),
    [
        ("rpctargets", "10.0.0.5:5551", "router_rpc_nodes"),
        ("rpcmode", "connect", "router_rpc_nodes"),
        ("rpcmode", "host", "pooled.lend"),
    ],
)
def test_koboldcpp_rpc_keys_that_would_use_addresses_are_refused_naming_the_key(
    key: str, value: str, word: str
) -> None:
    message = refused({**MODEL, key: value}, key, word)
    assert message.startswith(key)


def test_koboldcpp_rpc_defaults_are_dropped_and_never_reach_the_backend() -> None:
    saved = {
        "rpcmode": "disabled",
        "rpcport": 5551,
        "rpchost": "",
        "rpcdevice": "",
        "rpctargets": "",
    }
    config = parse({**MODEL, **saved})
    assert not set(saved) & set(config.raw)
    assert set(saved) <= set(config.ignored_keys)
