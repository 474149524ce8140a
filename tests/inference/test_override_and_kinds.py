"""The pipeline's pure parts (router/inference): whether a handler's `Override` may go to
another node as sent (`plain`, `relayable`, read over its field groups), and the kind that
serves each answer of the placement rule (`placing.kind_of`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from router.cluster import placement as rule
from router.config import ModelConfig
from router.domain import BackendMode, Lane
from router.forwarding import ModelRewriter, Selection
from router.inference import OnLease, Override, Pins, Serving, Upstream
from router.inference.context import Chosen
from router.inference.kinds import Guardian, Lend, Local, Relay
from router.inference.placing import kind_of
from router.runtime import Lease

SELECTION = Selection("m", b'{"model": "m"}', True, "json:model")


def _watch(_: Lease, rewriter: ModelRewriter) -> ModelRewriter:
    return rewriter


def _answer(_: Lease) -> web.StreamResponse:
    return web.Response()


async def _unload(_: ModelConfig, __: Lane) -> web.StreamResponse:
    return web.Response()


# (override, plain, relayable): every group that changes what is sent or how it is answered
# keeps the request here; pins let a watched request go elsewhere; how long the runtime stays
# loaded, or which lane serves it here, changes nothing that another node gets.
CASES = [
    (Override(SELECTION), True, True),
    (Override(SELECTION, serving=Serving(keep_alive=30.0)), True, True),
    (Override(SELECTION, serving=Serving(lane=Lane.TEXT)), True, True),
    (Override(SELECTION, Upstream("/inference")), False, False),
    (Override(SELECTION, Upstream(headers={"a": "b"})), False, False),
    (Override(SELECTION, on_lease=OnLease(_watch)), False, False),
    (Override(SELECTION, on_lease=OnLease(_watch), pins=Pins(remember="r:")), False, True),
    (Override(SELECTION, pins=Pins(follow="r:1")), True, True),
    (Override(SELECTION, on_lease=OnLease(answer=_answer), pins=Pins(follow="r:1")), False, False),
    (Override(SELECTION, Upstream("/x"), pins=Pins(remember="r:")), False, False),
    (Override(SELECTION, serving=Serving(unleased=_unload), pins=Pins(follow="r:1")), False, False),
]


@pytest.mark.parametrize(("override", "plain", "relayable"), CASES)
def test_plain_and_relayable_read_the_groups(
    override: Override, plain: bool, relayable: bool
) -> None:
    assert (override.plain, override.relayable) == (plain, relayable)


def _chosen() -> Chosen:
    config = ModelConfig(
        id="m",
        path=Path("/models/m.kcpps"),
        raw={},
        backend_mode=BackendMode.KOBOLD,
        components={},
        lanes=frozenset({Lane.TEXT}),
        image_id=None,
    )
    return Chosen(config, "m", Lane.TEXT)


def test_each_placement_has_its_kind_with_its_data() -> None:
    chosen = _chosen()
    relay = rule.Relay[str, str]("slave-a", ("link-1",), "r:")
    assert kind_of(relay, None) == Relay(relay)
    assert kind_of(rule.Guardian(), chosen) == Guardian(chosen)
    assert kind_of(rule.Lend[str](("link-1", "link-2")), chosen) == Lend(
        chosen,
        ("link-1", "link-2"),
    )
    assert kind_of(rule.Local(), chosen) == Local(chosen)


def test_a_placement_served_here_needs_its_chosen_model() -> None:
    with pytest.raises(AssertionError):
        kind_of(rule.Local(), None)
