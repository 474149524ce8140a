"""The pure choice of an unload (router/runtime/unloads.py): which runtimes it names, and which
of them are asleep (their stop begins at once; the pump would never see them)."""

from __future__ import annotations

from pathlib import Path

from router.domain import Family, Lane
from router.runtime import Runtime, RuntimeState, spec_for
from router.runtime.unloads import unload_targets
from tests.support.configs import text_config


def _runtimes(tmp_path: Path) -> tuple[Runtime, Runtime, Runtime]:
    a, b, c = (Runtime(spec_for(text_config(tmp_path, name), Lane.TEXT)) for name in "abc")
    c.state = RuntimeState.SLEEPING
    return a, b, c


def test_an_unload_of_a_lane_names_every_runtime_in_it_and_splits_off_the_asleep(
    tmp_path: Path,
) -> None:
    a, b, c = _runtimes(tmp_path)
    assert unload_targets([a, b, c], frozenset({Lane.TEXT}), None, None) == ({a, b}, {c})
    assert unload_targets([a, b, c], frozenset({Lane.IMAGE}), None, None) == (set(), set())


def test_a_model_or_a_family_narrows_the_unload(tmp_path: Path) -> None:
    a, b, c = _runtimes(tmp_path)
    text = frozenset({Lane.TEXT})
    assert unload_targets([a, b, c], text, "b", None) == ({b}, set())
    assert unload_targets([a, b, c], text, "c", None) == (set(), {c})
    assert unload_targets([a, b, c], text, None, Family.LLAMACPP) == ({a, b}, {c})
    assert unload_targets([a, b, c], text, None, Family.VLLM) == (set(), set())
