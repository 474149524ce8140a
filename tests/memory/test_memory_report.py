"""llama-server's own memory report, parsed from log lines (router/memory/report.py).

The host lines are copied from a real llama-server 0.6.0-dev run on a demo model (`-lv 4`);
the GPU row follows llama.cpp's source format (no GPU here). tests/real checks the parser
against a live process's log.
"""

from __future__ import annotations

from router.memory.report import MIB, parse_report

HOST_LOG = """\
0.00.024.493 I cmn  common_init_: fitting params to device memory ...
0.00.033.014 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |
0.00.033.016 I common_memory_breakdown_print: |   - Host               |                   49 =    15 +      24 +       9                |
0.00.033.238 I common_params_fit_impl: projected to use 49 MiB of host memory vs. 24105 MiB of total host memory
0.00.034.221 I load_tensors:   CPU_Mapped model buffer size =    15.61 MiB
0.00.035.050 I llama_kv_cache: size =   24.00 MiB (  4096 cells,   6 layers,  4/1 seqs), K (f16):   12.00 MiB, V (f16):   12.00 MiB
0.00.056.207 I sched_reserve:        CPU compute buffer size =     9.52 MiB
"""

GPU_LOG = """\
llama_memory_breakdown_print: | memory breakdown [MiB] | total    free     self   model   context   compute    unaccounted |
llama_memory_breakdown_print: |   - CUDA0 (NVIDIA GeForce RTX 4090) | 24080 = 18000 + ( 5800 =  4400 +     1024 +     376) +         280 |
llama_memory_breakdown_print: |   - CUDA1 (NVIDIA GeForce RTX 4090) | 24080 = 20000 + ( 3900 =  3000 +      768 +     132) +         180 |
llama_memory_breakdown_print: |   - Host               |                  420 =   410 +       0 +      10                |
llama_memory_breakdown_print: |   - CPU_REPACK         |                   30 =    30 +       0 +       0                |
"""


def test_host_table_kv_and_projection() -> None:
    report = parse_report(HOST_LOG.splitlines())
    assert report.found
    assert report.per_device() == {"host": 49 * MIB}
    host = report.devices["host"]
    assert (host.model, host.context, host.compute) == (15 * MIB, 24 * MIB, 9 * MIB)
    assert report.kv_bytes == 24 * MIB and report.kv_cells == 4096
    assert report.projected_host == 49 * MIB


def test_gpu_rows_map_to_nvml_ids_and_host_rows_sum() -> None:
    report = parse_report(GPU_LOG.splitlines())
    assert report.per_device() == {"gpu0": 5800 * MIB, "gpu1": 3900 * MIB, "host": 450 * MIB}
    assert report.devices["gpu0"].context == 1024 * MIB


def test_the_last_table_wins_and_text_between_ends_a_table() -> None:
    two = HOST_LOG + GPU_LOG.replace("CUDA1", "CUDA2") + "srv  update_slots: all slots are idle\n"
    report = parse_report(two.splitlines())
    assert set(report.per_device()) == {"gpu0", "gpu2", "host"}


def test_sliding_window_models_print_two_caches() -> None:
    lines = [
        "llama_kv_cache: size =   64.00 MiB (  8192 cells,   4 layers,  1/1 seqs), K (f16): ...",
        "llama_kv_cache: size =   10.00 MiB (  1536 cells,  20 layers,  1/1 seqs), K (f16): ...",
    ]
    report = parse_report(lines)
    assert report.kv_bytes == 74 * MIB


def test_a_log_without_a_report_finds_nothing() -> None:
    report = parse_report(["srv  llama_server: model loaded", "| not | a | table |"])
    assert not report.found and report.per_device() == {}
