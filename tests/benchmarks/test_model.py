"""The pure half of benchmarks (router/benchmarks/model.py, probes' parsing): no process."""

from __future__ import annotations

import io
import wave
from typing import Any

import pytest

from router.benchmarks import (
    RUN_SECTION,
    SECTIONS,
    BenchmarkError,
    Summary,
    expand_sections,
    listing,
    parse_run_request,
)
from router.benchmarks.model import (
    Iteration,
    Measured,
    Metric,
    run_metrics,
    run_status,
    section_metrics,
    section_status,
)
from router.benchmarks.probes import Stream, chunk_fields, llm_sample, tone_wav
from router.errors import BadRequest


def test_all_expands_to_every_section_in_run_order() -> None:
    assert expand_sections(["all"]) == SECTIONS
    assert SECTIONS == ("runtime", "llm", "embed", "image", "voice", "music")
    assert expand_sections(["voice", "LLM", "llm", "runtime"]) == ("runtime", "llm", "voice")
    assert expand_sections(["image", "all"]) == SECTIONS


def test_an_unknown_section_is_a_benchmark_error_naming_the_field() -> None:
    with pytest.raises(BenchmarkError) as caught:
        expand_sections(["llm", "warp-drive"])
    err = caught.value
    assert (err.status, err.type, err.param) == (400, "benchmark_error", "sections")
    assert "warp-drive" in err.message and "runtime" in err.message


def test_defaults_are_a_general_run_of_every_section() -> None:
    req = parse_run_request({"model_id": "m"})
    assert (req.type, req.sections, req.iterations, req.timeout_seconds) == (
        "general",
        SECTIONS,
        1,
        1800.0,
    )
    assert req.node_id is None


def test_naming_sections_makes_a_section_run() -> None:
    req = parse_run_request({"model_id": "m", "sections": ["llm"], "iterations": 20})
    assert (req.type, req.sections, req.iterations) == ("section", ("llm",), 20)
    # The CLI's comma list is accepted as well.
    assert parse_run_request({"model_id": "m", "sections": "llm, embed"}).sections == (
        "llm",
        "embed",
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "model_id"),
        ({"model_id": ""}, "model_id"),
        ({"model_id": 3}, "model_id"),
        ({"model_id": "m", "iterations": 0}, "iterations"),
        ({"model_id": "m", "iterations": 21}, "iterations"),
        ({"model_id": "m", "iterations": True}, "iterations"),
        ({"model_id": "m", "iterations": "3"}, "iterations"),
        ({"model_id": "m", "iterations": 2.5}, "iterations"),
        ({"model_id": "m", "timeout_seconds": 0}, "timeout_seconds"),
        ({"model_id": "m", "timeout_seconds": 7201}, "timeout_seconds"),
        ({"model_id": "m", "timeout_seconds": "soon"}, "timeout_seconds"),
        ({"model_id": "m", "type": "quick"}, "type"),
        ({"model_id": "m", "type": "section"}, "sections"),
        ({"model_id": "m", "type": "general", "sections": ["llm"]}, "sections"),
        ({"model_id": "m", "sections": [1]}, "sections"),
        ({"model_id": "m", "node_id": 7}, "node_id"),
    ],
)
def test_bad_fields_are_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_run_request(body)
    assert caught.value.param == param and caught.value.status == 400


def test_the_bounds_themselves_are_accepted() -> None:
    assert parse_run_request({"model_id": "m", "iterations": 1}).iterations == 1
    assert parse_run_request({"model_id": "m", "timeout_seconds": 7200}).timeout_seconds == 7200


def _it(error: str | None = None, **values: float) -> Iteration:
    return Iteration(10.0, {k: Measured(v, "ms") for k, v in values.items()}, error)


def test_metrics_are_means_over_the_iterations_that_measured_them() -> None:
    metrics = {m.name: m for m in section_metrics([_it(a=10, b=1), _it(a=20), _it("boom")])}
    assert metrics["a"].value == 15 and metrics["a"].status == "partial"
    assert metrics["a"].error == "boom" and metrics["a"].duration_ms == 20.0
    assert metrics["b"].value == 1
    whole = section_metrics([_it(a=1), _it(a=3)])[0]
    assert (whole.value, whole.status, whole.error) == (2, "success", None)


def test_section_and_run_statuses() -> None:
    assert section_status([_it(a=1), _it(a=2)]) == "success"
    assert section_status([_it(a=1), _it("x")]) == "partial"
    assert section_status([_it("x"), _it("y")]) == "failed"
    assert section_status([]) == "failed"
    assert run_status(["success", "skipped"]) == "success"
    assert run_status(["success", "failed", "skipped"]) == "partial"
    assert run_status(["failed", "skipped"]) == "failed"
    assert run_status(["skipped", "skipped"]) == "skipped"
    counts = {m.name: m.value for m in run_metrics(["success", "skipped", "skipped"], 12.5)}
    assert counts["total_run_ms"] == 12.5 and counts["sections_total"] == 3
    assert counts["sections_skipped"] == 2 and counts["sections_success"] == 1


def test_llm_rates_come_from_the_backends_timings_when_it_gives_them() -> None:
    stream = Stream()
    chunk_fields(stream, {"choices": [{"delta": {"role": "assistant", "content": ""}}]}, 5.0)
    chunk_fields(stream, {"choices": [{"delta": {"content": "Hi"}}]}, 40.0)
    chunk_fields(stream, {"choices": [{"delta": {"content": " there"}}]}, 60.0)
    last = {
        "choices": [],
        "usage": {"prompt_tokens": 12, "completion_tokens": 2},
        "timings": {"prompt_per_second": 300.0, "predicted_per_second": 55.5, "predicted_n": 2},
    }
    chunk_fields(stream, last, 61.0)
    sample = {k: v.value for k, v in llm_sample(stream, 100.0).items()}
    assert sample["first_completion_ms"] == 40.0  # the empty role chunk is no completion
    assert sample["tokens_per_second"] == 55.5 and sample["prompt_tokens_per_second"] == 300.0
    assert sample["completion_tokens"] == 2 and sample["prompt_tokens"] == 12
    assert sample["request_ms"] == 100.0


def test_llm_rates_fall_back_to_usage_over_the_observed_times() -> None:
    stream = Stream(first_ms=100.0, chunks=9, usage={"prompt_tokens": 50, "completion_tokens": 11})
    sample = {k: v.value for k, v in llm_sample(stream, 600.0).items()}
    assert sample["tokens_per_second"] == pytest.approx(10 / 0.5)  # after the first token
    assert sample["prompt_tokens_per_second"] == pytest.approx(50 / 0.1)
    # No usage at all: the streamed chunks are the count.
    bare = llm_sample(Stream(first_ms=10.0, chunks=4), 110.0)
    assert bare["completion_tokens"].value == 4 and "prompt_tokens" not in bare


def test_a_stream_without_text_is_a_failed_probe() -> None:
    from router.benchmarks.probes import ProbeFailed

    with pytest.raises(ProbeFailed):
        llm_sample(Stream(), 10.0)


def test_summaries_round_trip_through_their_row() -> None:
    summary = Summary("r1", "n1", "m", "section", "llm", "running", 1000.0)
    summary.metrics = [Metric("request_ms", "success", 5.0, 5.0, "ms")]
    summary.finish("success", 1000.25)
    columns = (
        "id",
        "section",
        "node_id",
        "model_id",
        "type",
        "status",
        "started_at",
        "finished_at",
        "duration_ms",
        "metrics_json",
        "error",
    )
    back = Summary.from_row(dict(zip(columns, summary.row(), strict=True)))
    assert back.to_dict() == summary.to_dict()
    shape = summary.to_dict()
    assert set(shape) >= {
        "run_id",
        "type",
        "section",
        "status",
        "started_at",
        "finished_at",
        "duration_ms",
        "metrics",
        "error",
    }
    assert shape["duration_ms"] == 250.0
    assert set(shape["metrics"][0]) == {"name", "status", "duration_ms", "value", "unit", "error"}


def test_listing_splits_history_from_the_newest_section_summaries() -> None:
    columns = (
        "id",
        "section",
        "node_id",
        "model_id",
        "type",
        "status",
        "started_at",
        "finished_at",
        "duration_ms",
        "metrics_json",
        "error",
    )

    def row(run: str, section: str, at: float, status: str = "success") -> dict[str, Any]:
        s = Summary(run, "n1", "m", "general", section, status, at)
        return dict(zip(columns, s.row(), strict=True))

    rows = [
        row("new", RUN_SECTION, 20),
        row("new", "llm", 20, "failed"),
        row("old", RUN_SECTION, 10),
        row("old", "llm", 10),
        row("old", "runtime", 10),
    ]
    answer = listing("n1", "m", rows)
    assert answer["latest"]["run_id"] == "new"
    assert [h["run_id"] for h in answer["history"]] == ["new", "old"]
    assert answer["sections"]["llm"]["run_id"] == "new"
    assert answer["sections"]["runtime"]["run_id"] == "old"
    assert listing("n1", "m", []) == {
        "node_id": "n1",
        "model_id": "m",
        "latest": None,
        "sections": {},
        "history": [],
    }


def test_the_audio_sample_is_a_wav_of_the_stated_length() -> None:
    with wave.open(io.BytesIO(tone_wav(0.5)), "rb") as wav:
        assert (wav.getnchannels(), wav.getframerate(), wav.getnframes()) == (1, 16000, 8000)
