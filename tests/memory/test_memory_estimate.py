"""The estimate before a load (router/memory/estimate.py, shape.py, launch.py, sizing.py).

Pure properties here; tests/real/test_memory_estimate_real.py compares the same estimate with
a live llama-server's own report."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from router.config import ModelConfig, parse_kcpps
from router.demo_models import generate_text_models, write_llama_gguf
from router.domain import BackendMode, Family, Lane
from router.memory.devices import Device
from router.memory.estimate import (
    KV_TYPE_BYTES,
    PROCESS_OVERHEAD,
    Footprint,
    LlamaOptions,
    file_estimate,
    kv_bytes,
    llama_footprint,
    split_llama,
    vllm_estimate,
)
from router.memory.launch import gpus_for, llama_options, vllm_utilization
from router.memory.shape import ModelShape, read_shape, shape_from_fields
from router.memory.sizing import estimate_config

MIB, GIB = 1 << 20, 1 << 30


def shape(**kw: object) -> ModelShape:
    base: dict[str, object] = dict(
        architecture="llama",
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_head_kv=(4, 4),
        key_length=16,
        value_length=16,
        n_ctx_train=2048,
        n_vocab=613,
        n_ff=128,
        tensor_bytes=480_000,
    )
    base.update(kw)
    return ModelShape(**base)  # type: ignore[arg-type]


def test_demo_model_kv_is_what_llama_server_reported() -> None:
    # Seen here: `llama_kv_cache: size = 1.00 MiB (2048 cells, 2 layers, 4/1 seqs)`.
    assert kv_bytes(shape(), LlamaOptions()) == 1 * MIB
    # `-np 2` alone: 2048 cells in each of 2 streams; `-c 2048 -np 2`: 1024 in each.
    assert kv_bytes(shape(), LlamaOptions(parallel=2)) == 2 * MIB
    assert kv_bytes(shape(), LlamaOptions(context=2048, parallel=2)) == 1 * MIB


@given(
    layers=st.integers(1, 64),
    heads_kv=st.sampled_from([1, 2, 4, 8]),
    group=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([32, 64, 128]),
    ctx=st.integers(256, 131072),
    kv_type=st.sampled_from(sorted(KV_TYPE_BYTES)),
)
def test_kv_formula(
    layers: int, heads_kv: int, group: int, head_dim: int, ctx: int, kv_type: str
) -> None:
    s = shape(
        n_layer=layers,
        n_head=heads_kv * group,
        n_head_kv=(heads_kv,) * layers,
        key_length=head_dim,
        value_length=head_dim,
        n_embd=heads_kv * group * head_dim,
    )
    per, block = KV_TYPE_BYTES[kv_type]
    got = kv_bytes(s, LlamaOptions(context=ctx, cache_k=kv_type, cache_v=kv_type))
    assert got == ctx * layers * heads_kv * 2 * (head_dim * per // block)
    # More context never needs less memory; a quantized cache never more than f16.
    assert kv_bytes(s, LlamaOptions(context=ctx * 2, cache_k=kv_type, cache_v=kv_type)) >= got
    if per / block <= 2:
        assert got <= kv_bytes(s, LlamaOptions(context=ctx))


def test_sliding_window_layers_hold_their_window() -> None:
    s = shape(
        architecture="gemma3",
        n_layer=6,
        n_head_kv=(4,) * 6,
        sliding_window=1024,
        swa_layers=frozenset(range(5)),
    )
    opts = LlamaOptions(context=32768)
    row = 4 * (16 + 16) * 2
    assert kv_bytes(s, opts) == 1 * 32768 * row + 5 * (1024 + 512) * row


def test_shape_fields_gqa_per_layer_and_swa_pattern() -> None:
    fields = {
        "block_count": 6,
        "embedding_length": 256,
        "attention.head_count": 8,
        "attention.head_count_kv": [2, 2, 2, 2, 2, 4],
        "context_length": 8192,
        "feed_forward_length": 512,
        "attention.sliding_window": 512,
    }
    s = shape_from_fields("gemma3", fields, n_vocab=1000, tensor_bytes=1)
    assert s.n_head_kv == (2, 2, 2, 2, 2, 4) and s.key_length == 32
    assert s.swa_layers == {0, 1, 2, 3, 4}  # every 6th layer is global (llama.cpp default)
    bert = shape_from_fields(
        "bert", {"block_count": 2, "attention.causal": False}, n_vocab=1, tensor_bytes=1
    )
    assert kv_bytes(bert, LlamaOptions()) == 0


def test_generated_gguf_shapes_are_read_back(tmp_path: Path) -> None:
    path = write_llama_gguf(
        tmp_path / "gqa.gguf", seed=4, n_embd=128, n_head=8, n_head_kv=2, n_layer=3, name="g"
    )
    s = read_shape(str(path))
    assert s is not None
    assert (s.n_layer, s.n_head, s.n_head_kv, s.key_length) == (3, 8, (2, 2, 2), 16)
    assert 0.9 < s.tensor_bytes / path.stat().st_size <= 1.0
    assert read_shape(str(tmp_path / "missing.gguf")) is None


@settings(max_examples=50)
@given(
    gpu_layers=st.one_of(st.none(), st.integers(0, 40)),
    n_gpus=st.integers(0, 3),
    kv_on_host=st.booleans(),
)
def test_split_keeps_every_byte(gpu_layers: int | None, n_gpus: int, kv_on_host: bool) -> None:
    s = shape(n_layer=32, n_head_kv=(4,) * 32, tensor_bytes=4 * GIB)
    opts = LlamaOptions(context=8192, gpu_layers=gpu_layers, kv_on_host=kv_on_host)
    foot = llama_footprint(s, opts)
    est = split_llama(foot, s, opts, tuple(f"gpu{i}" for i in range(n_gpus)))
    assert est.total == foot.total and est.source == "estimate"
    assert est.devices["host"] >= foot.overhead
    if n_gpus == 0 or gpu_layers == 0:
        assert set(est.devices) == {"host"}


def test_the_split_counts_the_output_layer() -> None:
    """llama.cpp offloads n_layer + 1 layers (the output layer is one more): with n_layer 4 a
    layer is a fifth of the weights and of the KV; the compute buffer goes where the layers
    go, the process overhead stays on the host. Exact bytes per device, not only their sum."""
    s = shape(n_layer=4, n_head_kv=(4,) * 4)
    foot = Footprint(weights=5000, kv=1000, compute=300, overhead=24)

    def split(gpu_layers: int | None, gpus: int = 1, kv_on_host: bool = False) -> dict[str, int]:
        opts = LlamaOptions(gpu_layers=gpu_layers, kv_on_host=kv_on_host)
        return dict(split_llama(foot, s, opts, tuple(f"gpu{i}" for i in range(gpus))).devices)

    assert split(2) == {"host": 3624, "gpu0": 2700}  # 2 of 5: 2000 + 400 + 300 on the GPU
    assert split(4) == {"host": 1224, "gpu0": 5100}  # 4 of 5, not all of them
    assert split(5) == split(None) == {"host": 24, "gpu0": 6300}  # all 5
    assert split(9) == split(5)  # more than there are: all
    assert split(2, gpus=2) == {"host": 3624, "gpu0": 1350, "gpu1": 1350}
    assert split(2, kv_on_host=True) == {"host": 4024, "gpu0": 2300}  # KV: all on the host
    assert split(0) == {"host": 6324}


def test_files_and_vllm() -> None:
    whisper = file_estimate("whispercpp", 100 * MIB, ("gpu1",))
    assert whisper.devices == {"host": PROCESS_OVERHEAD["whispercpp"], "gpu1": 125 * MIB}
    assert set(file_estimate("sdcpp", GIB, ()).devices) == {"host"}
    vllm = vllm_estimate(0.5, {"gpu0": 24 * GIB, "gpu1": 24 * GIB}, 8 * GIB)
    assert vllm.devices["gpu0"] == vllm.devices["gpu1"] == 12 * GIB
    assert vllm_estimate(None, {"gpu0": 10 * GIB}, 0).devices["gpu0"] == 9 * GIB


def _config(tmp_path: Path, raw: dict[str, object], mode: BackendMode) -> ModelConfig:
    path = tmp_path / "m.kcpps"
    path.write_text(json.dumps(raw))
    return parse_kcpps(path, path.read_bytes(), mode)


GPUS = (Device("gpu0", "gpu", "A", 24 * GIB, 0), Device("gpu1", "gpu", "B", 12 * GIB, 1))


def test_devices_follow_the_launch(tmp_path: Path) -> None:
    models = generate_text_models(tmp_path / "models")
    model = str(models["chat-a"])
    text = Lane.TEXT
    llama, vllm = Family.LLAMACPP, Family.VLLM

    def gpus(raw: dict[str, object], family: Family = llama, env: dict[str, str] | None = None):
        mode = BackendMode.VLLM if family is vllm else BackendMode.LLAMA_SDCPP
        return gpus_for(_config(tmp_path, raw, mode), family, text, GPUS, env or {})

    assert gpus({"model_param": model}) == ("gpu0", "gpu1")
    assert gpus({"model_param": model, "gpulayers": 0}) == ()
    assert gpus({"model_param": model, "usecpu": True}) == ()
    assert gpus({"model_param": model, "usecuda": ["normal", "1"]}) == ("gpu1",)
    assert gpus({"model_param": model}, env={"CUDA_VISIBLE_DEVICES": "1"}) == ("gpu1",)
    assert gpus({"model_param": model}, env={"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert (
        gpus_for(
            _config(tmp_path, {"model_param": model}, BackendMode.LLAMA_SDCPP), llama, text, (), {}
        )
        == ()
    )
    assert gpus({"model_param": model, "gpulayers": 0}, family=vllm) == ("gpu0", "gpu1")


def test_llama_options_from_the_kcpps(tmp_path: Path) -> None:
    models = generate_text_models(tmp_path / "models")
    raw = {
        "model_param": str(models["chat-a"]),
        "contextsize": 8192,
        "quantkv": 1,
        "parallel": 2,
        "noflashattention": True,
        "batchsize": 256,
        "gpulayers": 10,
        "lowvram": True,
        "serve_args": ["--gpu-memory-utilization", "0.6"],
    }
    config = _config(tmp_path, raw, BackendMode.LLAMA_SDCPP)
    opts = llama_options(config, Lane.TEXT)
    # -c is the per-slot contextsize times the 2 slots, as backends/llamacpp.py launches it.
    assert opts == LlamaOptions(16384, 2, "q8_0", "q8_0", False, 256, 10, True)
    assert vllm_utilization(config) == 0.6


def test_every_slot_counts_its_whole_contextsize(tmp_path: Path) -> None:
    # Issue 33: `parallel` 3 slots of `contextsize` 2048 each hold 3 x 2048 cells, which the
    # estimate (and so the ledger) counts; one slot (the default) holds 2048.
    models = generate_text_models(tmp_path / "models")
    host = (Device("host", "host", "host", 64 * GIB),)

    def kv(**raw: object) -> int:
        base = {"model_param": str(models["chat-a"]), "contextsize": 2048, **raw}
        config = _config(tmp_path, base, BackendMode.LLAMA_SDCPP)
        return estimate_config(config, Lane.TEXT, Family.LLAMACPP, host).detail["kv"]

    one_slot = kv()
    assert one_slot == 1 * MIB  # 2048 cells of the demo model, as llama-server reports
    assert kv(parallel=3) == 3 * one_slot
    assert kv(parallelrequests=2) == 2 * one_slot
    embed = _config(
        tmp_path,
        {"model_param": str(models["chat-a"]), "contextsize": 2048, "parallel": 3},
        BackendMode.LLAMA_SDCPP,
    )
    # The embeddings server is launched without -np: its automatic slots share -c cells.
    assert llama_options(embed, Lane.EMBEDDINGS).context == 2048


def test_estimate_config_for_the_demo_model(tmp_path: Path) -> None:
    models = generate_text_models(tmp_path / "models")
    config = _config(tmp_path, {"model_param": str(models["chat-a"])}, BackendMode.LLAMA_SDCPP)
    host = Device("host", "host", "host", 64 * GIB)
    est = estimate_config(config, Lane.TEXT, Family.LLAMACPP, (host,))
    assert set(est.devices) == {"host"} and est.source == "estimate"
    assert est.detail["kv"] == 1 * MIB
    assert est.detail["weights"] == read_shape(str(models["chat-a"])).tensor_bytes  # type: ignore[union-attr]
    on_gpu = estimate_config(config, Lane.TEXT, Family.LLAMACPP, (host, *GPUS))
    assert on_gpu.total == est.total and on_gpu.devices["host"] == PROCESS_OVERHEAD["llamacpp"]
    missing = _config(
        tmp_path, {"model_param": str(tmp_path / "gone.gguf")}, BackendMode.LLAMA_SDCPP
    )
    # No readable file: the file-size rule with size 0 leaves the process overhead alone.
    assert estimate_config(missing, Lane.TEXT, Family.LLAMACPP, (host,)).devices == {
        "host": PROCESS_OVERHEAD["llamacpp"]
    }
