"""Pure parts of the measurement (router/memory/fingerprint.py, router/memory/measure.py): the
fingerprint of what decides a configuration's memory, and the figure arithmetic."""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from router.config import ModelConfig, parse_kcpps
from router.domain import BackendMode, Family, Lane
from router.memory.estimate import PROCESS_OVERHEAD
from router.memory.figures import Measured
from router.memory.fingerprint import fingerprint
from router.memory.measure import (
    MAX_REPORT_LINES,
    RAISE_FACTOR,
    ReportLines,
    out_of_memory,
    process_figure,
    raised_figure,
    report_figure,
)
from router.memory.report import MIB, parse_report
from tests.memory.test_memory_report import GPU_LOG, HOST_LOG

BASE = {"model_param": "/models/chat.gguf", "contextsize": 4096, "gpulayers": 99}


def _config(raw: dict[str, object]) -> ModelConfig:
    data = json.dumps(raw).encode()
    return parse_kcpps(Path("/kcpps/chat.kcpps"), data, BackendMode.LLAMA_SDCPP)


def _fp(raw: dict[str, object]) -> str:
    return fingerprint(_config(raw), Lane.TEXT, Family.LLAMACPP)


def test_fingerprint_is_stable_and_short() -> None:
    assert _fp(BASE) == _fp(dict(BASE))
    assert len(_fp(BASE)) == 32 and int(_fp(BASE), 16) >= 0


MEMORY_KEYS = st.sampled_from(
    [
        ("contextsize", 8192),
        ("parallel", 2),
        ("quantkv", 1),
        ("gpulayers", 0),
        ("batchsize", 128),
        ("noflashattention", True),
        ("lowvram", True),
        ("model_param", "/models/other.gguf"),
    ]
)


@given(change=MEMORY_KEYS)
def test_every_memory_setting_changes_the_fingerprint(change: tuple[str, object]) -> None:
    key, value = change
    assert _fp(BASE) != _fp(BASE | {key: value})


def test_hashes_lane_family_gpus_and_extra_args_change_it() -> None:
    config = _config(BASE)
    plain = fingerprint(config, Lane.TEXT, Family.LLAMACPP)
    hashed = dataclasses.replace(config, asset_sha256={"model_param": "ab" * 32})
    assert fingerprint(hashed, Lane.TEXT, Family.LLAMACPP) != plain
    assert fingerprint(config, Lane.EMBEDDINGS, Family.LLAMACPP) != plain
    assert fingerprint(config, Lane.TEXT, Family.KOBOLD) != plain
    assert fingerprint(config, Lane.TEXT, Family.LLAMACPP, gpus=("gpu0",)) != plain
    assert fingerprint(config, Lane.TEXT, Family.LLAMACPP, extra_args=("-c", "512")) != plain
    # The hash map's order is no input: the same hashes give the same fingerprint.
    two = {"model_param": "aa", "mmproj": "bb"}
    swapped = dict(reversed(list(two.items())))
    assert fingerprint(
        dataclasses.replace(config, asset_sha256=two), Lane.TEXT, Family.LLAMACPP
    ) == fingerprint(dataclasses.replace(config, asset_sha256=swapped), Lane.TEXT, Family.LLAMACPP)


def test_report_figure_is_self_plus_the_estimates_overhead() -> None:
    host = report_figure(parse_report(HOST_LOG.splitlines()), "llamacpp")
    assert host == {"host": 49 * MIB + PROCESS_OVERHEAD["llamacpp"]}
    gpus = report_figure(parse_report(GPU_LOG.splitlines()), "llamacpp")
    assert gpus == {
        "gpu0": 5800 * MIB,
        "gpu1": 3900 * MIB,
        "host": (420 + 30) * MIB + PROCESS_OVERHEAD["llamacpp"],
    }
    kv_only = parse_report(HOST_LOG.splitlines()[-2:])  # a KV line but no table
    assert kv_only.found and report_figure(kv_only, "llamacpp") is None


def test_process_figure_keeps_gpus_that_hold_something() -> None:
    assert process_figure(30 * MIB, {}) == {"host": 30 * MIB}
    assert process_figure(30 * MIB, {"gpu0": 0, "gpu1": 5}) == {"host": 30 * MIB, "gpu1": 5}


SIZES = st.dictionaries(st.sampled_from(["host", "gpu0", "gpu1"]), st.integers(0, 1 << 40))


@given(estimate=SIZES, last=st.none() | SIZES)
def test_raised_figure_exceeds_estimate_and_last(
    estimate: dict[str, int], last: dict[str, int] | None
) -> None:
    previous = Measured(last) if last is not None else None
    raised = raised_figure(estimate, previous)
    assert set(raised) == set(estimate) | set(last or {})
    for device, amount in raised.items():
        floor = max(estimate.get(device, 0), (last or {}).get(device, 0))
        assert amount >= RAISE_FACTOR * floor
        assert amount <= RAISE_FACTOR * floor + 1


def test_raised_twice_asks_for_more_again() -> None:
    first = raised_figure({"host": 100 * MIB}, None)
    second = raised_figure({"host": 100 * MIB}, Measured(first, oom=True))
    assert first == {"host": 150 * MIB} and second == {"host": 225 * MIB}


def test_out_of_memory_is_read_from_the_message_the_tail_or_a_kill() -> None:
    assert out_of_memory("exited with code 1", ["ggml: failed to allocate buffer"], 1)
    assert out_of_memory("CUDA error: out of memory", [], 1)
    assert out_of_memory("torch.OutOfMemoryError: CUDA out of memory", [], None)
    assert out_of_memory("exited with code -9 before it was ready", [], -signal.SIGKILL)
    assert out_of_memory("exited with code 137", [], 137)
    assert not out_of_memory("exited with code 1", ["error: invalid argument: -zz"], 1)
    assert not out_of_memory("x was not ready after 20s (runtime.load_timeout)", [], None)


def test_report_lines_keep_only_the_report_and_stay_bounded() -> None:
    lines = ReportLines()
    sink_seen: list[bytes] = []
    tee = lines.tee(lambda _stream, line: sink_seen.append(line))
    for text in HOST_LOG.splitlines():
        tee("stderr", text.encode())
    assert len(sink_seen) == len(HOST_LOG.splitlines())  # the sink still sees every line
    assert parse_report(lines.lines).per_device() == {"host": 49 * MIB}
    assert len(lines.lines) == 4  # the table head, its row, the projection, the KV line
    for _ in range(3 * MAX_REPORT_LINES):
        lines.add(b"llama_kv_cache: size =    1.00 MiB (  2048 cells,   2 layers,  4/1 seqs)")
    assert len(lines.lines) == MAX_REPORT_LINES
