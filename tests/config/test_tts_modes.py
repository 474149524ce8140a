"""`ttsmodel` is valid under kobold and vllm (the contract's voice section), ignored with a
warning only under llama_sdcpp, whose llama-server has no text-to-speech."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router.config import KcppsError, parse_kcpps
from router.domain import BackendMode, Lane


def _parse(tmp_path: Path, mode: str, **raw: str):  # type: ignore[no-untyped-def]
    body = {"backend_mode": mode, **raw}
    return parse_kcpps(tmp_path / "voice.kcpps", json.dumps(body).encode(), BackendMode.KOBOLD)


@pytest.mark.parametrize("mode", ["kobold", "vllm"])
def test_ttsmodel_is_a_voice_component_under_kobold_and_vllm(tmp_path: Path, mode: str) -> None:
    config = _parse(tmp_path, mode, ttsmodel="tts.gguf")
    assert config.lanes == frozenset({Lane.VOICE})
    assert config.warnings == ()


def test_under_vllm_ttsmodel_is_the_voice_model_unless_whispermodel_is_set(tmp_path: Path) -> None:
    alone = _parse(tmp_path, "vllm", ttsmodel="tts")
    assert alone.model_file(Lane.VOICE) == tmp_path / "tts"
    both = _parse(tmp_path, "vllm", ttsmodel="tts", whispermodel="asr")
    assert both.model_file(Lane.VOICE) == tmp_path / "asr"


def test_ttsmodel_is_ignored_under_llama_sdcpp(tmp_path: Path) -> None:
    config = _parse(tmp_path, "llama_sdcpp", ttsmodel="tts.gguf", model_param="m.gguf")
    assert config.lanes == frozenset({Lane.TEXT})
    assert config.warnings == ("ttsmodel is ignored: llama_sdcpp mode has no text-to-speech",)
    with pytest.raises(KcppsError, match="ttsmodel is ignored"):
        _parse(tmp_path, "llama_sdcpp", ttsmodel="tts.gguf")
