"""The one GGUF header reader (router/memory/gguf.py): the memory estimate, the site inventory
and the Ollama routes read one file's header through it, and the file is parsed once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gguf
import pytest

from router.demo_models.gguf_llama import write_llama_gguf
from router.memory.shape import read_shape
from router.site.files import stat_file
from router.site.gguf_headers import read_gguf_header
from router.site.hashing import digest_file


def test_estimate_inventory_and_ollama_parse_a_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_llama_gguf(tmp_path / "chat.gguf", seed=3, n_layer=3, n_ctx=4096, name="Chat")
    opened: list[str] = []
    real_reader = gguf.GGUFReader

    def counting(file: str, mode: Any = "r") -> gguf.GGUFReader:
        opened.append(os.fspath(file))
        return real_reader(file, mode)

    monkeypatch.setattr(gguf, "GGUFReader", counting)
    shape = read_shape(os.fspath(path))
    stat = stat_file(path)
    assert stat is not None
    digest = digest_file(stat)
    header = read_gguf_header(os.fspath(path))
    assert opened == [os.fspath(path)]  # three readers, one parse
    assert shape is not None and (shape.architecture, shape.n_layer) == ("llama", 3)
    assert digest is not None and digest.metadata is not None
    assert digest.metadata["architecture"] == "llama" and digest.metadata["name"] == "Chat"
    assert digest.metadata["context_length"] == 4096
    assert header is not None and header["model_info"]["llama.block_count"] == 3
    assert header["model_info"]["general.parameter_count"] == digest.metadata["parameter_count"]


def test_a_changed_file_is_read_again_and_a_broken_one_has_no_header(tmp_path: Path) -> None:
    path = write_llama_gguf(tmp_path / "m.gguf", seed=1, n_layer=2, name="m")
    first = read_shape(os.fspath(path))
    write_llama_gguf(path, seed=1, n_layer=4, name="m")
    os.utime(path, ns=(1, 1))  # a new version even on a coarse clock
    again = read_shape(os.fspath(path))
    assert first is not None and again is not None and (first.n_layer, again.n_layer) == (2, 4)
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF")
    assert read_shape(os.fspath(broken)) is None and read_gguf_header(os.fspath(broken)) is None
