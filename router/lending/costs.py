"""Each node's own cost fits (docs/lending.md, "The cost model"): per (model, lane), how long
one job takes here and how long a load takes, from this node's own analytics. Pure: the store
reads the samples (router/store/cost_samples.py), these functions turn them into fits.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class CostFit:
    """`job_s`: the median backend time of one successful job (None: no sample at all);
    `load_s`: the median of the recent successful loads (None: never loaded here);
    `fitted`: enough job samples to trust `job_s` (`scheduling_min_samples`)."""

    model_id: str
    lane: str
    job_s: float | None
    load_s: float | None
    samples: int
    fitted: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # every field is a plain value, already in the view's order


def job_seconds(duration_ms: float, queue_wait_ms: float | None) -> float:
    """The backend's share of one request: its duration less the time it waited for a slot."""
    return max(0.0, (duration_ms - (queue_wait_ms or 0.0)) / 1000.0)


def fit_costs(
    jobs: Iterable[tuple[str, str, float]],
    loads: Mapping[str, Sequence[float]],
    min_samples: int,
) -> tuple[CostFit, ...]:
    """One fit per (model, lane) seen in `jobs` (model, lane, seconds), plus a load-only fit
    for each model that was loaded but served nothing in the window (lane "text").

    The median, not the mean: a job's duration has a long tail here (a request that paid a
    load, a client that asked for a huge answer once), and one such sample would make a
    small fit useless for a drain estimate. Loads count with no minimum: every successful load
    is load-cost data."""
    by_key: dict[tuple[str, str], list[float]] = {}
    for model, lane, seconds in jobs:
        if seconds >= 0:
            by_key.setdefault((model, lane), []).append(seconds)
    fits = []
    for (model, lane), values in sorted(by_key.items()):
        fits.append(
            CostFit(
                model,
                lane,
                round(statistics.median(values), 4),
                _median(loads.get(model, ())),
                len(values),
                len(values) >= min_samples,
            )
        )
    seen = {model for model, _ in by_key}
    for model in sorted(set(loads) - seen):
        load = _median(loads[model])
        if load is not None:
            fits.append(CostFit(model, "text", None, load, 0, False))
    return tuple(fits)


def _median(values: Sequence[float]) -> float | None:
    good = [v for v in values if v >= 0]
    return round(statistics.median(good), 4) if good else None


def fit_of(fits: Iterable[CostFit], model_id: str, lane: str) -> CostFit | None:
    """The fit of `model_id` on `lane` (a load-only fit counts for any lane)."""
    loose = None
    for fit in fits:
        if fit.model_id == model_id:
            if fit.lane == lane:
                return fit
            if fit.samples == 0:
                loose = fit
    return loose
