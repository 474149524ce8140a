"""The placement rule (router/cluster/placement.py): pure, so its properties are checked over
every combination of facts, like `choose_config` (tests/test_choice.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.cluster.placement import (
    Guardian,
    Lend,
    Local,
    LocalFacts,
    Relay,
    RelayFacts,
    place,
)

# Targets and links are opaque to the rule: node names and link names stand in for them.
nodes = st.sampled_from(["slave-a", "slave-b", "guardian-node"])
links = st.lists(st.sampled_from(["link-1", "link-2", "link-3"]), max_size=3)
relay_facts = st.builds(
    RelayFacts,
    pinned=st.none() | nodes,
    chosen=st.none() | nodes,
    relayable=st.booleans(),
    held=links,
    remember=st.none() | st.sampled_from(["response:", "sdcpp-job:"]),
)
local_facts = st.builds(LocalFacts, needs_guardian=st.booleans(), links=links)


@given(relay_facts, local_facts)
def test_a_pinned_follow_up_always_goes_to_its_pinned_node(
    relay: RelayFacts[str, str], local: LocalFacts[str]
) -> None:
    if relay.pinned is None:
        return
    assert place(relay, local) == Relay(relay.pinned)
    assert place(relay, None) == Relay(relay.pinned)  # nothing local is asked


@given(relay_facts, local_facts)
def test_a_model_chosen_on_another_node_relays_there(
    relay: RelayFacts[str, str], local: LocalFacts[str]
) -> None:
    if relay.pinned is not None or relay.chosen is None or not relay.relayable:
        return
    placed = place(relay, local)
    assert placed == Relay(relay.chosen, tuple(relay.held), relay.remember)


@given(relay_facts, local_facts)
def test_a_request_that_may_not_be_relayed_is_served_here(
    relay: RelayFacts[str, str], local: LocalFacts[str]
) -> None:
    if relay.pinned is not None or relay.relayable:
        return
    assert not isinstance(place(relay, local), Relay)


@given(relay_facts, local_facts)
def test_a_guardian_answers_only_when_the_model_cannot_take_the_input(
    relay: RelayFacts[str, str], local: LocalFacts[str]
) -> None:
    placed = place(relay, None if relay.relays else local)
    if isinstance(placed, Guardian):
        assert local.needs_guardian and not relay.relays
    elif not relay.relays:
        assert not local.needs_guardian


@given(relay_facts, local_facts)
def test_local_whenever_nothing_else_applies(
    relay: RelayFacts[str, str], local: LocalFacts[str]
) -> None:
    placed = place(relay, None if relay.relays else local)
    nothing_else = not relay.relays and not local.needs_guardian and not local.links
    assert isinstance(placed, Local) == nothing_else
    if isinstance(placed, Lend):
        assert placed.links == tuple(local.links) and not local.needs_guardian


@given(relay_facts, local_facts)
def test_the_decision_is_deterministic(relay: RelayFacts[str, str], local: LocalFacts[str]) -> None:
    mine = None if relay.relays else local
    assert place(relay, mine) == place(relay, mine)


def test_a_request_served_here_needs_its_local_facts() -> None:
    with pytest.raises(ValueError, match="local facts"):
        place(RelayFacts[str, str](), None)


def test_a_model_served_here_with_no_other_fact_is_local() -> None:
    assert place(RelayFacts[str, str](relayable=True), LocalFacts[str]()) == Local()
