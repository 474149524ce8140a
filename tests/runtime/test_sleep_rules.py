"""The pure parts of vLLM sleep instead of stop (router/runtime/sleep.py, docs/swaps.md):
the `router_sleep` key, the launch flag and environment, the host-memory rule and the
transitions of the sleeping state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.registry import adapter_for
from router.config import KcppsError, Settings, parse_kcpps
from router.config.schema import VllmSection
from router.domain import BackendMode, Family, Lane
from router.runtime.sleep import may_sleep, weights_size
from router.runtime.state import _ALLOWED, RuntimeState


def _parse(extra: dict[str, object], mode: BackendMode = BackendMode.VLLM) -> bool:
    data = json.dumps({"model_param": "/srv/qwen", **extra}).encode()
    return parse_kcpps(Path("/srv/m.kcpps"), data, mode).sleep


def test_kcpps_router_sleep() -> None:
    assert _parse({}) is False
    assert _parse({"router_sleep": 1}) is True
    assert _parse({"router_sleep": True}) is True
    assert _parse({"router_sleep": 0}) is False
    for bad in ("1", 2, "yes", 1.0, []):
        with pytest.raises(KcppsError, match="router_sleep must be 0 or 1"):
            _parse({"router_sleep": bad})


def test_a_sleeper_launches_with_sleep_mode_and_dev_routes() -> None:
    vllm = adapter_for(Family.VLLM)
    settings = Settings(vllm=VllmSection(command=("prog",)))
    data = json.dumps({"model_param": "/srv/qwen", "router_sleep": 1}).encode()
    sleeper = parse_kcpps(Path("/srv/s.kcpps"), data, BackendMode.VLLM)
    plain = parse_kcpps(Path("/srv/p.kcpps"), b'{"model_param": "/srv/qwen"}', BackendMode.VLLM)
    assert "--enable-sleep-mode" in vllm.argv(sleeper, Lane.TEXT, 1, settings)
    assert vllm.default_env(sleeper, Lane.TEXT)["VLLM_SERVER_DEV_MODE"] == "1"
    assert "--enable-sleep-mode" not in vllm.argv(plain, Lane.TEXT, 1, settings)
    assert "VLLM_SERVER_DEV_MODE" not in vllm.default_env(plain, Lane.TEXT)


@given(
    wanted=st.booleans(),
    family=st.sampled_from(list(Family)),
    weights=st.integers(0, 1 << 40),
    room=st.integers(0, 1 << 40),
)
def test_may_sleep_only_a_wanted_vllm_that_fits_in_host_memory(
    wanted: bool, family: Family, weights: int, room: int
) -> None:
    # `room`: what the memory package grants (router/memory/host.py, its own tests).
    fits = weights <= room
    assert may_sleep(wanted, family, weights, room) == (wanted and family is Family.VLLM and fits)


def test_weights_size_of_a_file_and_of_a_model_folder(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.safetensors").write_bytes(b"x" * 10)
    (tmp_path / "m" / "config.json").write_bytes(b"y" * 5)
    assert weights_size(tmp_path / "m") == 15
    assert weights_size(tmp_path / "m" / "a.safetensors") == 10
    assert weights_size(tmp_path / "absent") == 0


def test_sleeping_transitions() -> None:
    assert RuntimeState.SLEEPING in _ALLOWED[RuntimeState.READY]
    assert _ALLOWED[RuntimeState.SLEEPING] == {
        RuntimeState.LOADING,  # woken
        RuntimeState.STOPPING,  # unloaded, or the sleep call failed
        RuntimeState.FAILED,  # its process died
    }
    # Only a serving runtime goes to sleep; a loading or stopping one never does.
    for state in (RuntimeState.LOADING, RuntimeState.STOPPING, RuntimeState.FAILED):
        assert RuntimeState.SLEEPING not in _ALLOWED[state]
