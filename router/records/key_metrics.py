"""Per scoped key series on /metrics (docs/configuration.md, "Scoped keys"): requests by
status class, errors, tokens and queue wait, labelled by the key's name (never its secret).
Requests no scoped key sent are not counted here (the per-route series count every request)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class KeyCounters:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "tensor_router_key_requests",
            "Requests a scoped key sent, by key name and status class.",
            ["key", "status_class"],
            registry=registry,
        )
        self.errors = Counter(
            "tensor_router_key_errors",
            "Requests of a scoped key answered with a status >= 400 (the client still there).",
            ["key"],
            registry=registry,
        )
        self.tokens = Counter(
            "tensor_router_key_tokens",
            "Tokens a scoped key's requests used (the backends' usage reports).",
            ["key"],
            registry=registry,
        )
        self.queue_wait = Counter(
            "tensor_router_key_queue_wait_seconds",
            "Time a scoped key's requests waited for a runtime, summed.",
            ["key"],
            registry=registry,
        )

    def observe(self, key: str, status: int, aborted: bool, tokens: int, queue_wait: float) -> None:
        self.requests.labels(key, f"{status // 100}xx").inc()
        if status >= 400 and not aborted:
            self.errors.labels(key).inc()
        if tokens > 0:
            self.tokens.labels(key).inc(tokens)
        self.queue_wait.labels(key).inc(queue_wait)
