"""router_unload_policy: the trigger set (pure) and its effect on running runtimes."""

from __future__ import annotations

import pytest

from router.config import evicts, static_lanes
from router.config.unload_policy import PolicyError, parse_triggers
from router.domain import BackendMode, Lane
from tests.support.harness import RouterHarness


def test_bare_value_and_array_forms() -> None:
    assert parse_triggers("text") == {"text"}
    assert parse_triggers(["image", "config:chat-a", "family:kobold"]) == {
        "image",
        "config:chat-a",
        "family:kobold",
    }
    assert parse_triggers(None) == parse_triggers("") == parse_triggers("none") == frozenset()


@pytest.mark.parametrize(
    "value", [["none", "text"], ["all", "image"], "family:ollama", "config:", "gpu", [3], [""]]
)
def test_malformed_policies_are_refused(value: object) -> None:
    with pytest.raises(PolicyError):
        parse_triggers(value)


def test_static_lanes_and_dynamic_entries() -> None:
    assert static_lanes({"all"}) == frozenset(Lane)
    assert static_lanes({"text", "config:x"}) == {Lane.TEXT}
    assert evicts({"config:chat-a"}, "chat-a", BackendMode.LLAMA_SDCPP)
    assert evicts({"family:llama_sdcpp"}, "other", BackendMode.LLAMA_SDCPP)
    assert not evicts({"family:kobold", "config:b"}, "chat-a", BackendMode.LLAMA_SDCPP)


@pytest.mark.parametrize("policy", ["text", ["config:chat-a"], ["family:llama_sdcpp"]])
async def test_loading_a_config_stops_what_its_policy_names(
    harness: RouterHarness, policy: object
) -> None:
    harness.model("chat-a")
    harness.model("sd", sdmodel="sd.gguf", router_unload_policy=policy)
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    assert (await client.post("/router/v1/load", json={"model": "sd"})).status_code == 200
    assert harness.runtimes.status_of("chat-a") == "unloaded"
    assert harness.runtimes.status_of("sd") == "ready"


async def test_no_policy_keeps_other_lanes_running(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.model("sd", sdmodel="sd.gguf")
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    assert (await client.post("/router/v1/load", json={"model": "sd"})).status_code == 200
    assert harness.runtimes.status_of("chat-a") == "ready"
