"""The pure half of benchmarks: the run request, section expansion, summaries and statuses.

Nothing here touches a process, a socket or the store, so all of it is unit-tested directly
(tests/benchmarks/test_model.py). The shapes are the contract's (cluster-and-site notes,
"Benchmarks"): a run is stored as one row per section plus one row for the run as a whole
(section `run`), each row rendering as a Summary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from router.domain import Lane
from router.errors import BadRequest, Conflict
from router.fields import pick

# In the order a run takes them: the load first, so later sections find the model warm.
SECTIONS = ("runtime", "llm", "embed", "image", "voice", "music")
SECTION_LANES: Mapping[str, Lane] = {
    "llm": Lane.TEXT,
    "embed": Lane.EMBEDDINGS,
    "image": Lane.IMAGE,
    "voice": Lane.VOICE,
    "music": Lane.MUSIC,
}
ALL = "all"
RUN_SECTION = "run"  # the row (and Summary) of the run as a whole
TYPES = ("general", "section")
MAX_ITERATIONS = 20
DEFAULT_TIMEOUT_S = 1800.0
MAX_TIMEOUT_S = 7200.0

SUCCESS, FAILED, SKIPPED, PARTIAL, RUNNING = "success", "failed", "skipped", "partial", "running"


class BenchmarkError(BadRequest):
    """A request the benchmark runner cannot take (an unknown section)."""

    type = "benchmark_error"


class BenchmarkBusy(Conflict):
    """Runs serialize per node: a second one is refused while one runs (docs/decisions.md)."""

    type, code = "benchmark_error", "benchmark_running"


@dataclass(frozen=True)
class RunRequest:
    model_id: str
    type: str
    sections: tuple[str, ...]
    iterations: int
    timeout_seconds: float
    node_id: str | None = None


def parse_run_request(body: Mapping[str, Any]) -> RunRequest:
    """`{node_id?, model_id, type?, sections?, iterations?, timeout_seconds?}`, checked.

    `type` defaults to `section` when sections are named and `general` otherwise; a general
    run covers every section, so naming a narrower set with it is refused.
    """
    model_id = body.get("model_id", body.get("model"))
    if not isinstance(model_id, str) or not model_id:
        raise BadRequest("model_id must be a non-empty string", param="model_id")
    node_id = body.get("node_id")
    if node_id is not None and not isinstance(node_id, str):
        raise BadRequest("node_id must be a string", param="node_id")
    raw_sections = body.get("sections")
    kind = body.get("type", "section" if raw_sections else "general")
    if kind not in TYPES:
        raise BadRequest("type must be general or section", param="type")
    if raw_sections is None or raw_sections == []:
        if kind == "section":
            raise BadRequest('a section run needs sections, e.g. ["llm"]', param="sections")
        raw_sections = [ALL]
    if isinstance(raw_sections, str):
        raw_sections = [part.strip() for part in raw_sections.split(",") if part.strip()]
    if not isinstance(raw_sections, list) or not all(isinstance(s, str) for s in raw_sections):
        raise BadRequest("sections must be a list of section names", param="sections")
    sections = expand_sections(raw_sections)
    if kind == "general" and sections != SECTIONS:
        raise BadRequest(
            'a general run covers every section; use "type": "section" to run fewer',
            param="sections",
        )
    return RunRequest(
        model_id=model_id,
        type=kind,
        sections=sections,
        iterations=_iterations(body.get("iterations", 1)),
        timeout_seconds=_timeout(body.get("timeout_seconds", DEFAULT_TIMEOUT_S)),
        node_id=node_id,
    )


def expand_sections(names: Iterable[str]) -> tuple[str, ...]:
    """Known names (and `all`) in run order, each once; an unknown name is a benchmark_error."""
    wanted: set[str] = set()
    for name in names:
        key = name.strip().lower()
        if key == ALL:
            wanted.update(SECTIONS)
        elif key in SECTIONS:
            wanted.add(key)
        else:
            raise BenchmarkError(
                f"unknown benchmark section {name[:40]!r}; known: {', '.join(SECTIONS)} or all",
                param="sections",
            )
    return tuple(s for s in SECTIONS if s in wanted)


def _iterations(value: Any) -> int:
    # bool is an int in Python, and `true` is no count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"iterations must be an integer 1..{MAX_ITERATIONS}", param="iterations")
    if not 1 <= value <= MAX_ITERATIONS:
        raise BadRequest(f"iterations must be between 1 and {MAX_ITERATIONS}", param="iterations")
    return value


def _timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequest("timeout_seconds must be a number of seconds", param="timeout_seconds")
    if not 0 < value <= MAX_TIMEOUT_S:
        raise BadRequest(
            f"timeout_seconds must be above 0 and at most {MAX_TIMEOUT_S:g}",
            param="timeout_seconds",
        )
    return float(value)


# ---- results -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    value: float
    unit: str


Sample = dict[str, Measured]  # one iteration of one section: metric name -> value


@dataclass(frozen=True)
class Metric:
    name: str
    status: str
    duration_ms: float | None
    value: float | None
    unit: str
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "duration_ms": _round(self.duration_ms),
            "value": _round(self.value),
            "unit": self.unit,
            "error": self.error,
        }


@dataclass
class Iteration:
    """What one iteration of a section produced: a sample, or the reason it has none."""

    duration_ms: float
    sample: Sample = field(default_factory=dict)
    error: str | None = None


def section_metrics(iterations: Sequence[Iteration]) -> list[Metric]:
    """One metric per name, the mean over the iterations that measured it.

    A metric that some iterations lack is `partial`; the first error explains the gap.
    """
    names: dict[str, str] = {}
    for it in iterations:
        for name, measured in it.sample.items():
            names.setdefault(name, measured.unit)
    first_error = next((it.error for it in iterations if it.error), None)
    metrics = []
    for name, unit in names.items():
        having = [it for it in iterations if name in it.sample]
        values = [it.sample[name].value for it in having]
        status = SUCCESS if len(having) == len(iterations) else PARTIAL
        metrics.append(
            Metric(
                name,
                status,
                sum(it.duration_ms for it in having),
                sum(values) / len(values),
                unit,
                None if status == SUCCESS else first_error,
            )
        )
    return metrics


def section_status(iterations: Sequence[Iteration]) -> str:
    ok = sum(1 for it in iterations if it.error is None)
    if ok == len(iterations) and iterations:
        return SUCCESS
    return PARTIAL if ok else FAILED


def run_status(statuses: Sequence[str]) -> str:
    """success when every section that ran succeeded, failed when none did, else partial."""
    ran = [s for s in statuses if s != SKIPPED]
    if not ran:
        return SKIPPED
    if all(s == SUCCESS for s in ran):
        return SUCCESS
    if all(s == FAILED for s in ran):
        return FAILED
    return PARTIAL


def run_metrics(statuses: Sequence[str], total_ms: float) -> list[Metric]:
    counts = [
        Metric(f"sections_{name}", SUCCESS, None, float(sum(s == name for s in statuses)), "count")
        for name in (SUCCESS, FAILED, SKIPPED, PARTIAL)
    ]
    total = Metric("sections_total", SUCCESS, None, float(len(statuses)), "count")
    return [Metric("total_run_ms", SUCCESS, total_ms, total_ms, "ms"), total, *counts]


# ---- summaries ---------------------------------------------------------------------------


@dataclass
class Summary:
    """One row of `benchmark_runs` (a section of a run, or the run as a whole)."""

    run_id: str
    node_id: str
    model_id: str
    type: str
    section: str
    status: str
    started_at: float
    finished_at: float | None = None
    duration_ms: float | None = None
    metrics: list[Metric] = field(default_factory=list)
    error: str | None = None

    def finish(self, status: str, finished_at: float, error: str | None = None) -> None:
        self.status, self.finished_at, self.error = status, finished_at, error
        self.duration_ms = max(0.0, (finished_at - self.started_at) * 1000.0)

    def to_dict(self) -> dict[str, Any]:
        names = ("run_id", "model_id", "type", "section", "status", "started_at", "finished_at")
        return pick(self, *names, "duration_ms", "metrics", "error") | {
            "duration_ms": _round(self.duration_ms),
            "metrics": [m.to_dict() for m in self.metrics],
            "option_changes": [],  # the router never changes a model's options to benchmark it
        }

    def row(self) -> tuple[Any, ...]:
        """The `benchmark_runs` columns, in router/store/benchmarks.py's COLUMNS order."""
        metrics = json.dumps([m.to_dict() for m in self.metrics])
        return (
            self.run_id,
            self.section,
            self.node_id,
            self.model_id,
            self.type,
            self.status,
            self.started_at,
            self.finished_at,
            self.duration_ms,
            metrics,
            self.error,
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Summary:
        try:
            raw = json.loads(row.get("metrics_json") or "[]")
        except ValueError:
            raw = []
        metrics = [_metric(m) for m in raw if isinstance(m, dict)]
        return cls(
            run_id=row["id"],
            node_id=row["node_id"],
            model_id=row["model_id"],
            type=row["type"],
            section=row["section"],
            status=row["status"],
            started_at=row["started_at"],
            finished_at=row.get("finished_at"),
            duration_ms=row.get("duration_ms"),
            metrics=metrics,
            error=row.get("error"),
        )


def _metric(raw: Mapping[str, Any]) -> Metric:
    return Metric(
        str(raw.get("name")),
        str(raw.get("status")),
        raw.get("duration_ms"),
        raw.get("value"),
        str(raw.get("unit") or ""),
        raw.get("error"),
    )


def listing(node_id: str, model_id: str, rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The GET answer from a model's rows, newest first: `latest` run, the newest summary of
    each section, and the run history."""
    history: list[dict[str, Any]] = []
    sections: dict[str, dict[str, Any]] = {}
    for row in rows:
        summary = Summary.from_row(row).to_dict()
        if row["section"] == RUN_SECTION:
            history.append(summary)
        else:
            sections.setdefault(row["section"], summary)
    return {
        "node_id": node_id,
        "model_id": model_id,
        "latest": history[0] if history else None,
        "sections": {s: sections[s] for s in SECTIONS if s in sections},
        "history": history,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
