"""Prometheus metrics on an injected registry (never the global one, so tests and several
apps in one process do not collide)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from router.domain import Lane
from router.records.key_metrics import KeyCounters
from router.records.tokens import TokenCounters


class LeaseView(Protocol):
    """The part of a runtime snapshot the gauges read (records sit below the runtime layer)."""

    @property
    def lane(self) -> Lane: ...
    @property
    def leases(self) -> int: ...


class RuntimeReader(Protocol):
    """What the gauges read from the runtime manager."""

    def views(self) -> Sequence[LeaseView]: ...
    def queue_length(self, lane: Lane) -> int: ...


class RuntimeGauges(Collector):
    """`queued` and `in_flight` by lane, read at scrape time from the manager's snapshots.

    A lease counts once, under its runtime's primary lane (`RuntimeView.lane`): a KoboldCpp
    runtime occupying text, image and voice must not add each request three times
    (docs/decisions.md, "Metrics"). A queued request waits in exactly one lane's queue.
    """

    def __init__(self, reader: RuntimeReader) -> None:
        self._reader = reader

    def collect(self) -> Iterator[Metric]:
        queued = GaugeMetricFamily(
            "tensor_router_queued", "Requests waiting for a runtime, by lane.", labels=["lane"]
        )
        in_flight = GaugeMetricFamily(
            "tensor_router_in_flight", "Requests being served, by lane.", labels=["lane"]
        )
        leases = {lane: 0 for lane in Lane}
        for view in self._reader.views():
            leases[view.lane] += view.leases
        for lane in Lane:
            queued.add_metric([lane.value], self._reader.queue_length(lane))
            in_flight.add_metric([lane.value], leases[lane])
        yield queued
        yield in_flight


@dataclass(frozen=True)
class RuntimeBytes:
    """One runtime's memory as GET /router/v1/status shows it, with the labels of its series."""

    model: str
    lane: str
    device: str
    source: str
    bytes: int


@dataclass(frozen=True)
class MemoryFigures:
    """The devices rows of GET /router/v1/status and each runtime's bytes, read at scrape time
    from the manager's `memory_now()`, the snapshot GET /router/v1/status answers from."""

    devices: Sequence[Mapping[str, Any]] = ()
    runtimes: Sequence[RuntimeBytes] = field(default_factory=tuple)


class MemoryGauges(Collector):
    """Device budget and use and per-runtime bytes; empty until a scrape hands it figures."""

    def __init__(self) -> None:
        self.figures = MemoryFigures()

    def collect(self) -> Iterator[Metric]:
        budget = GaugeMetricFamily(
            "tensor_router_memory_budget_bytes",
            "Memory the router may fill on each device (docs/residency.md).",
            labels=["device", "kind"],
        )
        used = GaugeMetricFamily(
            "tensor_router_memory_used_bytes",
            "Memory the router's runtimes hold on each device, estimated or measured.",
            labels=["device", "kind"],
        )
        held = GaugeMetricFamily(
            "tensor_router_runtime_memory_bytes",
            "Memory one runtime holds (over all its devices; `device` is where most of it is).",
            labels=["model", "lane", "device", "source"],
        )
        for row in self.figures.devices:
            labels = [str(row["device"]), str(row.get("kind", ""))]
            budget.add_metric(labels, row["budget"])
            used.add_metric(labels, row["used"])
        for rt in self.figures.runtimes:
            held.add_metric([rt.model, rt.lane, rt.device, rt.source], rt.bytes)
        yield budget
        yield used
        yield held


_RequestChildren = tuple[Counter, Histogram, Histogram]
# The runtime-state series, one per state event (`sleeping`: vLLM put to sleep, docs/swaps.md).
_STATE_EVENTS = ("loading", "ready", "failed", "unloading", "unloaded", "sleeping")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_LOAD_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests, self.duration, self.ttfb, self.queue_wait = _request_series(r)
        self.loads, self.kv_cache, self.readahead, self.store_replaced = _event_counters(r)
        self.load_duration, self.runtime_state = _runtime_series(r)
        # Each series' child per label values, found once: `labels()` validates and locks on
        # every call, ~3 us each, four per request (bench/profile_proxy.py).
        self._per_request: dict[tuple[str, str, str], _RequestChildren] = {}
        self._ttfb_of: dict[str, Histogram] = {}  # (a lane's series appears at its first TTFB)
        self.tokens = TokenCounters(r)  # per model and lane, counted at scrape time
        self.keys = KeyCounters(r)  # per scoped key
        self._gauges: RuntimeGauges | None = None
        self._memory = MemoryGauges()
        r.register(self._memory)

    def watch(self, reader: RuntimeReader) -> None:
        """Serve the queue and in-flight gauges from `reader` (one at a time)."""
        self.unwatch()
        self._gauges = RuntimeGauges(reader)
        self.registry.register(self._gauges)

    def unwatch(self) -> None:
        if self._gauges is not None:
            self.registry.unregister(self._gauges)
            self._gauges = None

    def observe_request(
        self,
        route: str,
        lane: str,
        status: int,
        duration: float,
        ttfb: float | None,
        queue_wait: float,
    ) -> None:
        key = (route, lane, f"{status // 100}xx")
        children = self._per_request.get(key)
        if children is None:
            children = self._per_request[key] = (
                self.requests.labels(*key),
                self.duration.labels(lane),
                self.queue_wait.labels(lane),
            )
        requests, duration_of, queue_wait_of = children
        requests.inc()
        duration_of.observe(duration)
        if ttfb is not None:
            ttfb_of = self._ttfb_of.get(lane)
            if ttfb_of is None:
                ttfb_of = self._ttfb_of[lane] = self.ttfb.labels(lane)
            ttfb_of.observe(ttfb)
        queue_wait_of.observe(queue_wait)

    def on_event(self, event: dict[str, Any]) -> None:
        """Runtime events from the bus keep the load and state series current."""
        kind = event.get("event")
        runtime, family = event.get("runtime"), event.get("family", "")
        if kind == "ready" and not event.get("woken"):  # a vLLM wake is not a load
            self.loads.labels(family, "ok").inc()
            self.load_duration.labels(family).observe(event.get("load_seconds", 0.0))
        elif kind == "failed":
            self.loads.labels(family, "failed").inc()
        elif kind == "kv_cache":
            self.kv_cache.labels(event.get("action", ""), event.get("result", "")).inc()
        elif kind == "readahead":
            self.readahead.labels(event.get("result", "")).inc()
        if runtime and kind in _STATE_EVENTS:
            for state in _STATE_EVENTS:
                self.runtime_state.labels(runtime, state).set(1 if state == kind else 0)

    def render(self, memory: MemoryFigures | None = None) -> bytes:
        """The exposition; `memory`: the figures of this scrape (none: the memory series are
        empty rather than stale)."""
        self._memory.figures = memory or MemoryFigures()
        self.tokens.fold()
        try:
            return generate_latest(self.registry)
        finally:
            self._memory.figures = MemoryFigures()


def _request_series(r: CollectorRegistry) -> tuple[Counter, Histogram, Histogram, Histogram]:
    """Per request (observe_request)."""
    requests = Counter(
        "tensor_router_requests",
        "Requests answered, by route template, lane and status class.",
        ["route", "lane", "status_class"],
        registry=r,
    )
    duration = Histogram(
        "tensor_router_request_duration_seconds",
        "Whole request time.",
        ["lane"],
        buckets=_LATENCY_BUCKETS,
        registry=r,
    )
    ttfb = Histogram(
        "tensor_router_time_to_first_byte_seconds",
        "Time until the backend's response headers arrived.",
        ["lane"],
        buckets=_LATENCY_BUCKETS,
        registry=r,
    )
    queue_wait = Histogram(
        "tensor_router_queue_wait_seconds",
        "Time from arrival to the start of backend work.",
        ["lane"],
        buckets=_LATENCY_BUCKETS,
        registry=r,
    )
    return requests, duration, ttfb, queue_wait


def _event_counters(r: CollectorRegistry) -> tuple[Counter, Counter, Counter, Counter]:
    """Counted from the bus (on_event), and the store's file replacements (the app)."""
    loads = Counter(
        "tensor_router_loads", "Backend loads, by result.", ["family", "result"], registry=r
    )
    kv_cache = Counter(
        "tensor_router_kv_cache_operations",
        "KV cache saves and restores (docs/swaps.md), by action and result"
        " (ok, none, passed, rejected, failed, timeout).",
        ["action", "result"],
        registry=r,
    )
    readahead = Counter(
        "tensor_router_readahead",
        "Read-aheads of an incoming model's files during a drain (docs/swaps.md), by result"
        " (started, done, stopped, cancelled, skipped, failed).",
        ["result"],
        registry=r,
    )
    store_replaced = Counter(
        "tensor_router_store_file_replaced",
        "Times the store file was found deleted or replaced and a fresh one opened.",
        registry=r,
    )
    return loads, kv_cache, readahead, store_replaced


def _runtime_series(r: CollectorRegistry) -> tuple[Histogram, Gauge]:
    """Load times and runtime states, from the bus (on_event)."""
    load_duration = Histogram(
        "tensor_router_load_duration_seconds",
        "Spawn to ready.",
        ["family"],
        buckets=_LOAD_BUCKETS,
        registry=r,
    )
    runtime_state = Gauge(
        "tensor_router_runtime_state",
        "1 for the state each runtime is in.",
        ["runtime", "state"],
        registry=r,
    )
    return load_duration, runtime_state
