"""Per-model token counters (issue 36's dashboard): prompt, completion and cached prompt tokens
by model and lane, from the usage report at the end of each answer, read the way the analytics
row reads it (router/store/rows.py `sniff_usage`, the same tail bytes).

Read when /metrics is scraped, not on the request path: a request only hands over its tail
(a reference, no copy), and `fold()` parses what piled up since the last scrape. The pile is
bounded: past `PENDING_MAX` answers it is folded at once, so memory stays under
PENDING_MAX x the tail size (4 KiB) however rarely anyone scrapes.
"""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter

from router.store.rows import sniff_usage

PENDING_MAX = 256
# Cached prompt tokens, in each API's spelling: OpenAI's `prompt_tokens_details.cached_tokens`
# (llama-server and vLLM too), Anthropic's `cache_read_input_tokens`, llama-server's
# `timings.cache_n`. The last one in the tail wins, as for the other counts.
_CACHED = re.compile(rb'"(?:cached_tokens|cache_read_input_tokens|cache_n)"\s*:\s*(\d+)')


def cached_tokens(tail: bytes) -> int | None:
    """Prompt tokens the backend took from its cache, from the answer's last usage report."""
    found = _CACHED.findall(tail)
    return int(found[-1]) if found else None


class TokenCounters:
    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["model", "lane"]
        self.prompt = Counter(
            "tensor_router_prompt_tokens",
            "Prompt tokens the backends reported, by model and lane.",
            labels,
            registry=registry,
        )
        self.completion = Counter(
            "tensor_router_completion_tokens",
            "Completion tokens the backends reported, by model and lane.",
            labels,
            registry=registry,
        )
        self.cached = Counter(
            "tensor_router_cached_prompt_tokens",
            "Prompt tokens the backends took from their cache instead of computing them"
            " (part of the prompt tokens), by model and lane.",
            labels,
            registry=registry,
        )
        self._pending: list[tuple[str, str, bytes]] = []

    def note(self, model: str, lane: str, tail: bytes) -> None:
        """One answer's last bytes (the request path: an append)."""
        self._pending.append((model, lane, tail))
        if len(self._pending) >= PENDING_MAX:
            self.fold()

    def fold(self) -> None:
        """Count the usage reports handed over since the last fold."""
        pending, self._pending = self._pending, []
        for model, lane, tail in pending:
            usage = sniff_usage(tail)
            if not usage:
                continue
            if "prompt_tokens" in usage:
                self.prompt.labels(model, lane).inc(usage["prompt_tokens"])
            if "completion_tokens" in usage:
                self.completion.labels(model, lane).inc(usage["completion_tokens"])
            cached = cached_tokens(tail)
            if cached is not None:
                self.cached.labels(model, lane).inc(cached)


__all__ = ["PENDING_MAX", "TokenCounters", "cached_tokens"]
