"""`router_vllm_nodes` in a `.kcpps` (docs/kcpps.md): the follower nodes of a vLLM gang, by
node ID only, and only in a vLLM file."""

from __future__ import annotations

from typing import Any

import pytest

from router.config.kcpps_router_keys import KNOWN_KEYS
from router.domain import BackendMode
from tests.config.test_kcpps import parse, refused

MODEL = {"backend_mode": "vllm", "model_param": "big"}


def test_router_vllm_nodes_lists_follower_node_ids_in_rank_order() -> None:
    assert "router_vllm_nodes" in KNOWN_KEYS
    assert parse(MODEL).vllm_nodes is None
    nodes = parse({**MODEL, "router_vllm_nodes": ["box-c", "box-b"]}).vllm_nodes
    assert nodes == ("box-c", "box-b")
    assert parse({**MODEL, "router_vllm_nodes": []}).vllm_nodes is None


@pytest.mark.parametrize(
    ("value", "word"),
    [
        (["10.0.0.5:29501"], "no node ID"),
        (["box-b", "box-b"], "twice"),
        ("auto", "a list of at most"),
        ("box-b", "a list of at most"),
        (["x"] * 17, "at most 16"),
    ],
)
def test_router_vllm_nodes_refuses_addresses_and_bad_lists(value: Any, word: str) -> None:
    refused({**MODEL, "router_vllm_nodes": value}, "router_vllm_nodes", word)


def test_router_vllm_nodes_belongs_to_a_vllm_file_only() -> None:
    llama = {"model_param": "big.gguf", "router_vllm_nodes": ["box-b"]}
    refused(llama, "router_vllm_nodes", "backend_mode vllm", "router_rpc_nodes")
    # The settings' default mode counts as the file's own.
    config = parse({"model_param": "big", "router_vllm_nodes": ["b"]}, mode=BackendMode.VLLM)
    assert config.vllm_nodes == ("b",)
