"""Generated demo models: files, GGUF metadata, distinct chat models, idempotency (no binary)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from router.demo_models import (
    CHAT_A_NAME,
    CHAT_B_NAME,
    generate_text_models,
    write_bert_gguf,
    write_kcpps,
    write_llama_gguf,
    write_text_kcpps,
)
from router.demo_models.gguf_llama import WORD_START


def _field(reader: gguf.GGUFReader, key: str) -> object:
    field = reader.get_field(key)
    assert field is not None, f"missing GGUF key {key}"
    return field.contents()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return generate_text_models(tmp_path_factory.mktemp("models"))


def test_generate_writes_three_small_files(tmp_path: Path) -> None:
    started = time.monotonic()
    paths = generate_text_models(tmp_path)
    elapsed = time.monotonic() - started
    assert set(paths) == {"chat-a", "chat-b", "embed"}
    assert {p.name for p in tmp_path.iterdir()} == {"chat-a.gguf", "chat-b.gguf", "embed.gguf"}
    for path in paths.values():
        assert 50_000 < path.stat().st_size < 1_000_000
    assert elapsed < 5.0  # about 0.5 s on a loaded 2-core box


def test_chat_model_metadata(models: dict[str, Path]) -> None:
    reader = gguf.GGUFReader(models["chat-a"])
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "general.name") == CHAT_A_NAME
    assert _field(reader, "llama.embedding_length") == 64
    assert _field(reader, "llama.block_count") == 2
    assert _field(reader, "llama.context_length") == 2048
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    assert "<|im_start|>" in str(_field(reader, "tokenizer.chat_template"))
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True
    assert _field(reader, "tokenizer.ggml.add_space_prefix") is True


def test_chat_vocab_has_byte_fallback_and_special_ids(models: dict[str, Path]) -> None:
    reader = gguf.GGUFReader(models["chat-a"])
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))  # type: ignore[call-overload]
    types = list(_field(reader, "tokenizer.ggml.token_type"))  # type: ignore[call-overload]
    scores = list(_field(reader, "tokenizer.ggml.scores"))  # type: ignore[call-overload]
    assert len(tokens) == len(types) == len(scores)
    byte_ids = [i for i, t in enumerate(types) if t == gguf.TokenType.BYTE]
    assert [tokens[i] for i in byte_ids] == [f"<0x{b:02X}>" for b in range(256)]
    assert len(set(tokens)) == len(tokens)
    assert tokens[_field(reader, "tokenizer.ggml.bos_token_id")] == "<s>"  # type: ignore[index]
    assert tokens[_field(reader, "tokenizer.ggml.eos_token_id")] == "</s>"  # type: ignore[index]
    assert tokens[_field(reader, "tokenizer.ggml.eot_token_id")] == "<|im_end|>"  # type: ignore[index]
    assert tokens[_field(reader, "tokenizer.ggml.unknown_token_id")] == "<unk>"  # type: ignore[index]
    # Longer pieces must outscore their prefixes or the SPM merger stops early.
    hello = tokens.index(WORD_START + "hello")
    assert scores[hello] > scores[tokens.index(WORD_START + "he")]


def test_chat_weights_shapes_and_scale(models: dict[str, Path]) -> None:
    reader = gguf.GGUFReader(models["chat-a"])
    tensors = {t.name: t for t in reader.tensors}
    n_vocab = len(reader.get_field("tokenizer.ggml.tokens").data)  # type: ignore[union-attr]
    assert list(tensors["token_embd.weight"].shape) == [64, n_vocab]  # ggml order
    assert list(tensors["blk.1.ffn_gate.weight"].shape) == [64, 128]
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F32 for t in reader.tensors)
    q = np.asarray(tensors["blk.0.attn_q.weight"].data)
    assert 0.015 < float(q.std()) < 0.025
    assert np.all(np.asarray(tensors["blk.0.attn_norm.weight"].data) == 1.0)


def test_chat_models_differ(models: dict[str, Path]) -> None:
    a, b = gguf.GGUFReader(models["chat-a"]), gguf.GGUFReader(models["chat-b"])
    assert _field(b, "general.name") == CHAT_B_NAME != _field(a, "general.name")
    wa = {t.name: np.asarray(t.data) for t in a.tensors}
    wb = {t.name: np.asarray(t.data) for t in b.tensors}
    assert wa.keys() == wb.keys()
    assert not np.array_equal(wa["token_embd.weight"], wb["token_embd.weight"])


def test_same_seed_is_reproducible(tmp_path: Path) -> None:
    one = write_llama_gguf(tmp_path / "one.gguf", seed=7, name="same")
    two = write_llama_gguf(tmp_path / "two.gguf", seed=7, name="same")
    assert one.read_bytes() == two.read_bytes()


def test_bert_metadata(models: dict[str, Path]) -> None:
    reader = gguf.GGUFReader(models["embed"])
    assert _field(reader, "general.architecture") == "bert"
    assert _field(reader, "tokenizer.ggml.model") == "bert"
    assert _field(reader, "bert.attention.causal") is False
    assert _field(reader, "bert.pooling_type") == gguf.PoolingType.MEAN
    assert _field(reader, "tokenizer.ggml.token_type_count") == 2
    assert _field(reader, "bert.embedding_length") == 32
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))  # type: ignore[call-overload]
    # llama.cpp has no CLS key: BERT's [CLS] is the BOS token.
    pairs = (("bos", "[CLS]"), ("seperator", "[SEP]"), ("padding", "[PAD]"), ("mask", "[MASK]"))
    for key, piece in pairs:
        assert tokens[_field(reader, f"tokenizer.ggml.{key}_token_id")] == piece  # type: ignore[index]
    assert WORD_START + "hello" in tokens
    assert not any(t.startswith("##") for t in tokens)


def test_bert_rejects_bad_head_split(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple"):
        write_bert_gguf(tmp_path / "bad.gguf", seed=1, n_embd=30, n_head=4)


def test_generate_is_idempotent(tmp_path: Path) -> None:
    first = generate_text_models(tmp_path)
    stamps = {k: (p.stat().st_mtime_ns, p.stat().st_ino) for k, p in first.items()}
    second = generate_text_models(tmp_path)
    assert second == first
    assert {k: (p.stat().st_mtime_ns, p.stat().st_ino) for k, p in second.items()} == stamps
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "chat-a.gguf",
        "chat-b.gguf",
        "embed.gguf",
    ]


def test_generate_repairs_a_damaged_file(tmp_path: Path) -> None:
    good = generate_text_models(tmp_path)["chat-b"].read_bytes()
    (tmp_path / "chat-b.gguf").write_bytes(good[:1000])
    generate_text_models(tmp_path)
    assert (tmp_path / "chat-b.gguf").read_bytes() == good


def test_text_kcpps(tmp_path: Path, models: dict[str, Path]) -> None:
    written = write_text_kcpps(tmp_path / "kcpps", models)
    assert set(written) == {"chat-a", "chat-b", "embed"}
    chat = json.loads(written["chat-b"].read_text())
    assert chat["model_param"] == str(models["chat-b"].resolve())
    assert chat["backend_mode"] == "llama_sdcpp"
    assert chat["contextsize"] == 2048
    embed = json.loads(written["embed"].read_text())
    assert embed["embeddingsmodel"] == str(models["embed"].resolve())
    assert "model_param" not in embed


def test_write_kcpps_leaves_unchanged_file_alone(tmp_path: Path) -> None:
    path = write_kcpps(tmp_path / "x.kcpps", model_param=Path("m.gguf"), contextsize=512)
    before = path.stat().st_mtime_ns
    time.sleep(0.01)
    write_kcpps(tmp_path / "x.kcpps", model_param=Path("m.gguf"), contextsize=512)
    assert path.stat().st_mtime_ns == before
    write_kcpps(tmp_path / "x.kcpps", model_param=Path("m.gguf"), contextsize=1024)
    assert json.loads(path.read_text())["contextsize"] == 1024
    assert Path(json.loads(path.read_text())["model_param"]).is_absolute()
