"""A tiny random-weight whisper model in the legacy ggml `.bin` format, and a test WAV.

whisper.cpp's `whisper-server` still loads only this format (not GGUF). The layout, as read by
`whisper_model_load` in whisper.cpp's src/whisper.cpp:

    u32 magic 0x67676d6c
    11 x i32 hyperparameters (n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
             n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype)
    i32 n_mel, i32 n_fft, f32[n_mel * n_fft] mel filterbank
    i32 n_tokens, then per token: u32 length + bytes
    tensors until EOF: i32 n_dims, i32 name length, i32 type, i32 ne[n_dims], name, raw data

`ne` is in ggml order (fastest-varying first), i.e. the reverse of the numpy shape.
The weights are noise, except that the decoder is steered to say SCRIPTED_TEXT and stop, so
every request is fast and its transcript predictable (see `_steer_decoder`).
"""

from __future__ import annotations

import math
import struct
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

GGML_FILE_MAGIC = 0x67676D6C
SAMPLE_RATE = 16_000
N_FFT = 400  # 25 ms window at 16 kHz, as whisper's front end uses
N_MELS = 80

# whisper.cpp hard-codes the special-token ids of the English-only vocabulary (eot 50256 ...),
# so n_vocab must match a real model; tokens past the ones we write are filled in by the loader.
N_VOCAB_EN = 51_864
N_REGULAR_TOKENS = 50_256
TOKEN_EOT = 50_256  # first special token of the English-only vocabulary
N_AUDIO_CTX = 1500  # 30 s of audio after the stride-2 conv: fixed by whisper's mel front end
N_TEXT_CTX = 448

FTYPE_F16 = 1
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
WEIGHT_SCALE = 0.02


@dataclass(frozen=True)
class WhisperShape:
    n_state: int = 64
    n_head: int = 2
    n_audio_layer: int = 2
    # whisper.cpp takes any 2-layer decoder (n_vocab != 51866) for a first-release distil model
    # and forces no-timestamps mode, whose segment times come out negative; 3 layers avoid that.
    n_text_layer: int = 3


# The Slaney mel scale (what whisper's filters use): linear below 1 kHz, logarithmic above.
_F_SP = 200.0 / 3  # Hz per mel on the linear part
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    freq = np.asarray(freq, dtype=np.float64)
    linear = freq / _F_SP
    logpart = _MIN_LOG_MEL + np.log(np.maximum(freq, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOGSTEP
    return np.where(freq >= _MIN_LOG_HZ, logpart, linear)


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    mels = np.asarray(mels, dtype=np.float64)
    linear = mels * _F_SP
    logpart = _MIN_LOG_HZ * np.exp(_LOGSTEP * (mels - _MIN_LOG_MEL))
    return np.where(mels >= _MIN_LOG_MEL, logpart, linear)


def mel_filterbank(n_mels: int = N_MELS, n_fft: int = N_FFT, sr: int = SAMPLE_RATE) -> np.ndarray:
    """Triangular, area-normalised filters, shape (n_mels, n_fft // 2 + 1), float32."""
    fft_freqs = np.linspace(0.0, sr / 2, n_fft // 2 + 1)
    mel_edges = np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(sr / 2)), n_mels + 2)
    hz_edges = _mel_to_hz(mel_edges)
    widths = np.diff(hz_edges)
    ramps = hz_edges[:, None] - fft_freqs[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    # Equal area per filter, so loudness does not depend on the band's width.
    filters *= (2.0 / (hz_edges[2:] - hz_edges[:-2]))[:, None]
    return filters.astype(np.float32)


_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
# What every transcript says (see _steer_decoder); tests can look for it.
SCRIPTED_TEXT = " tensor router"
# whisper.cpp looks the first three up by text (suppress_blank needs " "), so they must exist.
_REQUIRED_PIECES = (" ", " -", " '", *(" " + word for word in SCRIPTED_TEXT.split()))
_STEER_POSITION = 10.0  # dominates the noise in the residual stream (norm ~0.2)
_STEER_TOKEN = 2.0  # times ~8 after the final layer norm: a logit margin of ~16


def _pseudo_word(index: int) -> str:
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    value, parts = index // 2, []
    while True:
        value, digit = divmod(value, len(syllables))
        parts.append(syllables[digit])
        if value == 0:
            break
    word = "".join(parts)
    return " " + word if index % 2 == 0 else word


def _scripted_token_ids() -> list[int]:
    # The required pieces sit right after the 94 printable characters.
    first = 0x7F - 0x21
    return [first + _REQUIRED_PIECES.index(" " + word) for word in SCRIPTED_TEXT.split()]


def vocabulary(size: int = N_REGULAR_TOKENS) -> list[bytes]:
    """Printable ASCII characters, a few required pieces, then pseudo-words.

    All ASCII, so whatever tokens the noise picks, the server's JSON output stays valid UTF-8.
    """
    pieces = [chr(c) for c in range(0x21, 0x7F)] + list(_REQUIRED_PIECES)
    pieces += [_pseudo_word(i) for i in range(size - len(pieces))]
    return [piece.encode("ascii") for piece in pieces[:size]]


def _tensor_specs(shape: WhisperShape) -> Iterator[tuple[str, tuple[int, ...], int]]:
    """(name, numpy shape, ggml type) for every tensor whisper.cpp expects, in load order."""
    s, f16, f32 = shape.n_state, GGML_TYPE_F16, GGML_TYPE_F32
    yield "encoder.positional_embedding", (N_AUDIO_CTX, s), f32
    yield "encoder.conv1.weight", (s, N_MELS, 3), f16
    yield "encoder.conv1.bias", (s, 1), f32
    yield "encoder.conv2.weight", (s, s, 3), f16
    yield "encoder.conv2.bias", (s, 1), f32
    yield "encoder.ln_post.weight", (s,), f32
    yield "encoder.ln_post.bias", (s,), f32
    for i in range(shape.n_audio_layer):
        yield from _block_specs(f"encoder.blocks.{i}", s, cross=False)
    yield "decoder.positional_embedding", (N_TEXT_CTX, s), f32
    yield "decoder.token_embedding.weight", (N_VOCAB_EN, s), f16
    yield "decoder.ln.weight", (s,), f32
    yield "decoder.ln.bias", (s,), f32
    for i in range(shape.n_text_layer):
        yield from _block_specs(f"decoder.blocks.{i}", s, cross=True)


def _attention_specs(prefix: str, s: int) -> Iterator[tuple[str, tuple[int, ...], int]]:
    f16, f32 = GGML_TYPE_F16, GGML_TYPE_F32
    yield f"{prefix}_ln.weight", (s,), f32
    yield f"{prefix}_ln.bias", (s,), f32
    yield f"{prefix}.query.weight", (s, s), f16
    yield f"{prefix}.query.bias", (s,), f32
    yield f"{prefix}.key.weight", (s, s), f16  # whisper has no key bias
    yield f"{prefix}.value.weight", (s, s), f16
    yield f"{prefix}.value.bias", (s,), f32
    yield f"{prefix}.out.weight", (s, s), f16
    yield f"{prefix}.out.bias", (s,), f32


def _block_specs(prefix: str, s: int, *, cross: bool) -> Iterator[tuple[str, tuple[int, ...], int]]:
    f16, f32 = GGML_TYPE_F16, GGML_TYPE_F32
    yield f"{prefix}.mlp_ln.weight", (s,), f32
    yield f"{prefix}.mlp_ln.bias", (s,), f32
    yield f"{prefix}.mlp.0.weight", (4 * s, s), f16
    yield f"{prefix}.mlp.0.bias", (4 * s,), f32
    yield f"{prefix}.mlp.2.weight", (s, 4 * s), f16
    yield f"{prefix}.mlp.2.bias", (s,), f32
    yield from _attention_specs(f"{prefix}.attn", s)
    if cross:
        yield from _attention_specs(f"{prefix}.cross_attn", s)


def _tensor_values(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if name.endswith("ln.weight") or name.endswith("ln_post.weight"):
        values = np.ones(shape, dtype=np.float32)  # identity layer norms keep activations sane
    elif name.endswith(".bias"):
        values = np.zeros(shape, dtype=np.float32)
    else:
        values = rng.standard_normal(shape, dtype=np.float32) * WEIGHT_SCALE
    return _steer_decoder(name, values)


def _steer_decoder(name: str, values: np.ndarray) -> np.ndarray:
    """Make greedy decoding say SCRIPTED_TEXT, then end-of-text, whatever the audio.

    Pure noise never wins against whisper's timestamp rule (the summed probability of 1501
    timestamp tokens beats any single noise token), so transcripts would be empty; and it never
    emits end-of-text, so a request would otherwise decode its whole token budget. The logits
    are `ln(h) . token_embedding`: a large positional embedding along one axis per decoding
    step, with the chosen token's embedding on the same axis, makes that token win by ~16
    logits. The hidden state at position p picks token p + 1, so steering starts at position 0
    (start-of-transcript). No timestamp token is emitted, so whisper ends the one segment at the
    end of its 30 s window.
    """
    steps = [*_scripted_token_ids(), TOKEN_EOT]
    if name == "decoder.positional_embedding":
        positions = np.arange(values.shape[0])
        axes = np.minimum(positions, len(steps) - 1)  # end-of-text from then on
        values[positions, axes] += _STEER_POSITION
    elif name == "decoder.token_embedding.weight":
        for axis, token in enumerate(steps):
            values[token] = 0.0
            values[token, axis] = _STEER_TOKEN
    return values


def _write_header(out: BinaryIO, shape: WhisperShape) -> None:
    hparams = (
        N_VOCAB_EN,
        N_AUDIO_CTX,
        shape.n_state,
        shape.n_head,
        shape.n_audio_layer,
        N_TEXT_CTX,
        shape.n_state,
        shape.n_head,
        shape.n_text_layer,
        N_MELS,
        FTYPE_F16,
    )
    out.write(struct.pack("<I11i", GGML_FILE_MAGIC, *hparams))
    filters = mel_filterbank()
    out.write(struct.pack("<2i", *filters.shape))
    out.write(filters.astype("<f4").tobytes())
    pieces = vocabulary()
    out.write(struct.pack("<i", len(pieces)))
    out.write(b"".join(struct.pack("<I", len(piece)) + piece for piece in pieces))


def _write_tensor(out: BinaryIO, name: str, values: np.ndarray, ggml_type: int) -> None:
    ne = tuple(reversed(values.shape))
    encoded = name.encode("ascii")
    out.write(struct.pack(f"<3i{len(ne)}i", len(ne), len(encoded), ggml_type, *ne))
    out.write(encoded)
    dtype = "<f2" if ggml_type == GGML_TYPE_F16 else "<f4"
    out.write(np.ascontiguousarray(values, dtype=dtype).tobytes())


def write_whisper_ggml(path: Path, *, seed: int, shape: WhisperShape | None = None) -> Path:
    """Write a random-weight whisper model (about 8 MB at the default shape) and return `path`.

    Every transcript reads SCRIPTED_TEXT, in about 40 ms for a short clip, whatever the audio
    and the server's temperature settings.
    """
    shape = shape or WhisperShape()
    if shape.n_state % shape.n_head:
        raise ValueError("n_state must be a multiple of n_head")
    rng = np.random.default_rng(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as out:
        _write_header(out, shape)
        for name, tensor_shape, ggml_type in _tensor_specs(shape):
            _write_tensor(out, name, _tensor_values(name, tensor_shape, rng), ggml_type)
    partial.replace(path)  # a crash mid-write never leaves a truncated model under the real name
    return path


def write_test_wav(path: Path, seconds: float = 1.0, *, seed: int = 0) -> Path:
    """16 kHz mono PCM16: a 440 Hz tone under light noise, enough for whisper to chew on."""
    n = int(round(seconds * SAMPLE_RATE))
    t = np.arange(n, dtype=np.float64) / SAMPLE_RATE
    noise = np.random.default_rng(seed).standard_normal(n) * 0.05
    signal = 0.3 * np.sin(2 * np.pi * 440.0 * t) + noise
    pcm = np.clip(signal * 32767, -32768, 32767).astype("<i2")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(SAMPLE_RATE)
        wav.writeframes(pcm.tobytes())
    return path
