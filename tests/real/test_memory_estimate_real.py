"""The memory estimate against a live llama-server's own report (issue 25).

For the demo models and generated GGUFs of other shapes (grouped-query attention, several
context sizes, quantized KV, parallel slots) the estimate of weights + KV + compute must be
within 2x of the `self` figure llama-server prints in its memory breakdown, the KV cache
within 5% of its `llama_kv_cache: size` line, and the whole estimate (the process overhead
included) within 2x of the process's resident memory right after the load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from router.demo_models import write_bert_gguf, write_llama_gguf
from router.memory.estimate import LlamaOptions, llama_footprint
from router.memory.report import parse_report
from router.memory.shape import read_shape
from tests.real.conftest import LlamaServerFactory

MIB = 1 << 20


@dataclass(frozen=True)
class Case:
    name: str
    model: dict[str, int] = field(default_factory=dict)  # write_llama_gguf shape arguments
    args: tuple[str, ...] = ()
    opts: LlamaOptions = LlamaOptions()
    bert: bool = False


# Quantized KV blocks hold 32 elements: those cases use a head size of 32.
WIDE = {"n_embd": 128, "n_head": 4, "n_head_kv": 2, "n_layer": 4, "n_ff": 256}
CASES = [
    Case("demo-chat"),
    Case("demo-embed", args=("--embedding", "--pooling", "mean"), bert=True),
    Case(
        "gqa-c512",
        {"n_embd": 128, "n_head": 8, "n_head_kv": 2, "n_layer": 4},
        ("-c", "512"),
        LlamaOptions(context=512),
    ),
    Case(
        "gqa-c8192",
        {"n_embd": 128, "n_head": 8, "n_head_kv": 2, "n_layer": 4, "n_ctx": 8192},
        ("-c", "8192"),
        LlamaOptions(context=8192),
    ),
    Case(
        "kv-q8_0",
        WIDE,
        ("-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"),
        LlamaOptions(cache_k="q8_0", cache_v="q8_0"),
    ),
    Case(
        "kv-q4_0",
        WIDE,
        ("-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0", "-c", "4096"),
        LlamaOptions(context=4096, cache_k="q4_0", cache_v="q4_0"),
    ),
    Case("slots-2", WIDE, ("-np", "2"), LlamaOptions(parallel=2)),
    Case("no-flash", WIDE, ("-fa", "off"), LlamaOptions(flash_attention=False)),
]


def _write(case: Case, folder: Path) -> Path:
    path = folder / f"{case.name}.gguf"
    if case.bert:
        return write_bert_gguf(path, seed=3)
    return write_llama_gguf(path, seed=7, name=case.name, **case.model)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_estimate_within_2x_of_llama_servers_report(
    case: Case, llama_server: LlamaServerFactory, tmp_path: Path
) -> None:
    model = _write(case, tmp_path)
    shape = read_shape(str(model))
    assert shape is not None
    # `-lv 4`: llama-server prints its memory breakdown only at this verbosity.
    with llama_server(model, "-lv", "4", *case.args) as server:
        rss = psutil.Process(server.process.pid).memory_info().rss
        log = server.log_path.read_text(encoding="utf-8", errors="replace")
    report = parse_report(log.splitlines())
    assert report.found, f"no memory report in the log:\n{log[-3000:]}"
    foot = llama_footprint(shape, case.opts)
    reported = report.per_device()["host"]
    estimated = foot.weights + foot.kv + foot.compute
    print(f"{case.name}: estimate {estimated / MIB:.2f} MiB, llama-server {reported / MIB} MiB")
    assert reported / 2 <= estimated <= reported * 2
    if foot.kv:
        assert report.kv_bytes is not None
        assert abs(foot.kv - report.kv_bytes) <= 0.05 * report.kv_bytes + 0.01 * MIB
    else:
        assert not report.kv_bytes  # an encoder-only model keeps no KV cache
    assert rss / 2 <= foot.total <= rss * 2, f"process RSS {rss / MIB:.1f} MiB"
