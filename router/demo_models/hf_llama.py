"""A tiny random-weight Hugging Face Llama folder that vLLM (CPU) loads and serves offline.

    python -m router.demo_models.hf_llama OUT_DIR

Writes `config.json`, `generation_config.json`, `model.safetensors` (numpy + `safetensors`),
and a byte-level BPE tokenizer trained on the spot with `tokenizers` (`tokenizer.json`,
`tokenizer_config.json` with a ChatML chat template), so `/v1/chat/completions` works. Head
size 64: vLLM's CPU attention kernels support only a few head sizes, and 64 is the smallest
common one. Random weights generate random text (often invalid UTF-8 pieces), which is fine:
the tests check the plumbing, not the prose. Needs numpy, safetensors and tokenizers (all
dependencies of vLLM itself), about 1 MB on disk, well under a second.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Enough varied text for a few hundred merges; the content does not matter.
_CORPUS = (
    "The router forwards each request to the backend that serves the model. "
    "A home lab runs llama.cpp, KoboldCpp, stable-diffusion.cpp, whisper.cpp and vLLM. "
    "Models load on demand and unload when idle; nobody waits on a hung request. "
    "Hello, how are you today? I am fine, thank you. What is the weather like? "
    "0123456789 + - * / = ( ) [ ] { } < > : ; , . ! ? ' \" @ # $ % ^ & _ | ~ `"
)


@dataclass(frozen=True)
class TinyLlama:
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    vocab_size: int = 512


def write_hf_llama(out_dir: Path, shape: TinyLlama = TinyLlama(), seed: int = 0) -> Path:
    """Write the model folder (created if needed) and return it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = _write_tokenizer(out_dir, shape.vocab_size)
    ids = {token: vocab[token] for token in SPECIAL_TOKENS}
    config = _config(shape, len(vocab), ids)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    generation = {"bos_token_id": ids["<|im_start|>"], "eos_token_id": ids["<|im_end|>"]}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2))
    _write_weights(out_dir / "model.safetensors", shape, len(vocab), seed)
    return out_dir


def _write_tokenizer(out_dir: Path, vocab_size: int) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte: no unknown input
        show_progress=False,
    )
    tokenizer.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "model_max_length": 512,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHATML_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))
    special = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    vocab: dict[str, int] = tokenizer.get_vocab()
    return vocab


def _config(shape: TinyLlama, vocab_size: int, ids: dict[str, int]) -> dict[str, object]:
    return {
        **asdict(shape),
        "vocab_size": vocab_size,
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": ids["<|im_start|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }


def _write_weights(path: Path, shape: TinyLlama, vocab_size: int, seed: int) -> None:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    h, inter = shape.hidden_size, shape.intermediate_size
    kv = h // shape.num_attention_heads * shape.num_key_value_heads

    def dense(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    tensors = {
        "model.embed_tokens.weight": dense(vocab_size, h),
        "model.norm.weight": np.ones(h, np.float32),
        "lm_head.weight": dense(vocab_size, h),
    }
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": np.ones(h, np.float32),
            p + "post_attention_layernorm.weight": np.ones(h, np.float32),
            p + "self_attn.q_proj.weight": dense(h, h),
            p + "self_attn.k_proj.weight": dense(kv, h),
            p + "self_attn.v_proj.weight": dense(kv, h),
            p + "self_attn.o_proj.weight": dense(h, h),
            p + "mlp.gate_proj.weight": dense(inter, h),
            p + "mlp.up_proj.weight": dense(inter, h),
            p + "mlp.down_proj.weight": dense(h, inter),
        }
    save_file(tensors, str(path), metadata={"format": "pt"})


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m router.demo_models.hf_llama OUT_DIR")
    print(write_hf_llama(Path(sys.argv[1])))
