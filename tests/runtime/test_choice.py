"""The one rule for which configuration serves a request (router/runtime/choice.py).

Pure: configurations and runtime snapshots are plain values here, no process runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.config import ModelConfig
from router.domain import BackendMode, Family, Lane
from router.errors import BadRequest
from router.runtime import RuntimeState, RuntimeView, choose_config
from router.runtime.choice import active_view
from tests.support.views import runtime_view


def config(
    name: str, lanes: frozenset[Lane], mode: BackendMode = BackendMode.KOBOLD
) -> ModelConfig:
    return ModelConfig(
        id=name,
        path=Path(f"/models/{name}.kcpps"),
        raw={},
        backend_mode=mode,
        components={},
        lanes=lanes,
        image_id=f"{name}-img" if Lane.IMAGE in lanes else None,
    )


def view(
    cfg: ModelConfig,
    occupies: frozenset[Lane],
    state: RuntimeState = RuntimeState.READY,
    draining: bool = False,
) -> RuntimeView:
    lanes = sorted(occupies)
    return runtime_view(cfg, *lanes, family=Family.KOBOLD, state=state, draining=draining)


LANES = st.frozensets(st.sampled_from(list(Lane)), min_size=1)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[ModelConfig], list[RuntimeView]]:
    """Configs with unique IDs, and runtimes of some of them; a lane holds at most one."""
    lane_sets = draw(st.lists(LANES, max_size=6))
    configs = [config(f"m{i}", lanes) for i, lanes in enumerate(lane_sets)]
    views: list[RuntimeView] = []
    held: set[Lane] = set()
    for cfg in configs:
        if not draw(st.booleans()):
            continue
        occupies = draw(st.frozensets(st.sampled_from(sorted(cfg.lanes)), min_size=1))
        if occupies & held:
            continue
        held |= occupies
        state = draw(st.sampled_from(list(RuntimeState)))
        views.append(view(cfg, occupies, state, draw(st.booleans())))
    return configs, views


@given(worlds(), st.sampled_from(list(Lane)), st.booleans())
def test_an_unnamed_request_goes_to_the_active_runtime_else_the_only_config(
    world: tuple[list[ModelConfig], list[RuntimeView]], lane: Lane, load_unnamed: bool
) -> None:
    configs, views = world
    live = [
        v
        for v in views
        if lane in v.occupies
        and v.state in (RuntimeState.LOADING, RuntimeState.READY)
        and not v.draining
    ]
    candidates = [c for c in configs if lane in c.lanes]
    try:
        chosen = choose_config(None, lane, configs, views, load_unnamed=load_unnamed)
    except BadRequest as refused:
        assert not live
        assert len(candidates) != 1 or not load_unnamed
        assert refused.param == "model"
        for c in candidates:
            assert (c.image_id if lane is Lane.IMAGE else c.id) in refused.message
        return
    assert lane in chosen.lanes
    if live:
        assert chosen is live[0].config
    else:
        assert load_unnamed and candidates == [chosen]


@given(worlds(), st.sampled_from(list(Lane)), st.integers(0, 5))
def test_a_named_model_wins_whatever_runs(
    world: tuple[list[ModelConfig], list[RuntimeView]], lane: Lane, pick: int
) -> None:
    configs, views = world
    if not configs:
        return
    named = configs[pick % len(configs)]
    if lane in named.lanes:
        assert choose_config(named, lane, configs, views) is named
    else:
        with pytest.raises(BadRequest, match=f"has no {lane} component"):
            choose_config(named, lane, configs, views)


def test_draining_stopping_and_failed_runtimes_are_not_active() -> None:
    a, b = config("a", frozenset({Lane.TEXT})), config("b", frozenset({Lane.TEXT}))
    for gone in (
        view(a, frozenset({Lane.TEXT}), draining=True),
        view(a, frozenset({Lane.TEXT}), RuntimeState.STOPPING),
        view(a, frozenset({Lane.TEXT}), RuntimeState.FAILED),
        view(a, frozenset({Lane.TEXT}), RuntimeState.STOPPED),
    ):
        assert active_view(Lane.TEXT, [gone]) is None
        with pytest.raises(BadRequest, match="text models: a, b"):
            choose_config(None, Lane.TEXT, [a, b], [gone])
    loading = view(b, frozenset({Lane.TEXT}), RuntimeState.LOADING)
    assert choose_config(None, Lane.TEXT, [a, b], [loading]) is b


def test_a_kobold_runtime_is_active_in_every_lane_it_occupies() -> None:
    omni = config("omni", frozenset({Lane.TEXT, Lane.IMAGE}))
    other = config("other", frozenset({Lane.IMAGE}))
    views = [view(omni, frozenset({Lane.TEXT, Lane.IMAGE}))]
    assert choose_config(None, Lane.IMAGE, [omni, other], views) is omni


def test_serves_narrows_both_the_active_runtime_and_the_candidates() -> None:
    kobold = config("k", frozenset({Lane.VOICE}))
    vllm = config("v", frozenset({Lane.VOICE}), BackendMode.VLLM)
    views = [view(kobold, frozenset({Lane.VOICE}))]

    def realtime(c: ModelConfig) -> bool:
        return c.backend_mode is BackendMode.VLLM

    assert choose_config(None, Lane.VOICE, [kobold, vllm], views, serves=realtime) is vllm
    with pytest.raises(BadRequest, match="realtime models: v, v2"):
        choose_config(
            None,
            Lane.VOICE,
            [kobold, vllm, config("v2", frozenset({Lane.VOICE}), BackendMode.VLLM)],
            views,
            serves=realtime,
            what="realtime",
        )


def test_an_unnamed_request_that_may_not_load_says_nothing_is_loaded() -> None:
    only = config("e", frozenset({Lane.EMBEDDINGS}))
    with pytest.raises(BadRequest, match="no embedding model is loaded; name a model"):
        choose_config(None, Lane.EMBEDDINGS, [only], [], load_unnamed=False)
    ready = [view(only, frozenset({Lane.EMBEDDINGS}))]
    assert choose_config(None, Lane.EMBEDDINGS, [only], ready, load_unnamed=False) is only
