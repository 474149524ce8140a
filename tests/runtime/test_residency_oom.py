"""A load that runs out of memory (`runtime.residency: memory`, issue 25): recorded with that
reason, its figure raised, and retried once after a further eviction; a second failure is the
answer. The backend is the fake one behind a wrapper that prints llama.cpp's allocation error
and exits for the first N launches of chat-b (a counter file)."""

from __future__ import annotations

import json
import os
import shlex

import httpx
import pytest

from router.appkeys import CATALOG
from router.domain import Lane
from router.runtime.state import spec_for
from tests.fakes.wrappers import _write_script, write_fake_binary
from tests.support.harness import RouterHarness, chat
from tests.support.residency import no_measurement  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("no_measurement")

MIB = 1 << 20
OOM_LINE = "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 1234"


def _oom_first(harness: RouterHarness, failures: int) -> None:
    fake = write_fake_binary(harness.bin_dir, "llamacpp")
    count = harness.tmp / "launches"
    harness.programs["llamacpp"] = _write_script(
        harness.bin_dir / "oom-llama",
        f'case "$*" in *chat-b*) n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}\n'
        f'  if [ "$n" -lt {failures} ]; then echo {shlex.quote(OOM_LINE)} >&2; exit 1; fi;;\n'
        f'esac\nexec {shlex.quote(str(fake))} "$@"',
    )


async def _start(harness: RouterHarness) -> httpx.AsyncClient:
    for model_id in ("chat-a", "chat-b"):
        harness.model(model_id)
        os.truncate(harness.models_dir / f"{model_id}.gguf", 4 * MIB)
    base = harness.settings(residency="memory")
    await harness.start(base)
    assert harness.app is not None
    spec = spec_for(harness.app[CATALOG].require("chat-a"), Lane.TEXT)
    one = harness.runtimes.ledger.holdings.estimate(spec).devices["host"]
    await harness.close()
    # Both fit as estimated; chat-b raised by half no longer fits next to chat-a.
    memory = base.memory.model_copy(update={"host_budget": 2 * one + one // 4, "reserve": 0})
    return await harness.start(base.model_copy(update={"memory": memory}))


async def _load_errors(client: httpx.AsyncClient, needle: str) -> list:
    """The load-errors table: the failure is recorded when the load fails, before the retry
    answers, and the read waits for held writes, so one read after the answer sees it."""
    r = await client.get("/router/v1/site/load-errors")
    return [e for e in r.json()["errors"] if needle in json.dumps(e)]


async def test_out_of_memory_is_retried_once_after_a_further_eviction(
    harness: RouterHarness,
) -> None:
    _oom_first(harness, failures=1)
    client = await _start(harness)
    assert (await client.post("/v1/chat/completions", json=chat("chat-a"))).status_code == 200
    r = await client.post("/v1/chat/completions", json=chat("chat-b"))
    assert r.status_code == 200, r.text  # the retry loaded it
    assert {v.config.id for v in harness.runtimes.views()} == {"chat-b"}  # chat-a evicted
    assert harness.runtimes.spawn_count == 3  # chat-a, chat-b (out of memory), chat-b again
    (record,) = await _load_errors(client, "out of memory")
    assert record["model"] == "chat-b" and "failed to allocate" in json.dumps(record)


async def test_a_second_out_of_memory_is_the_answer(harness: RouterHarness) -> None:
    _oom_first(harness, failures=2)
    client = await _start(harness)
    r = await client.post("/v1/chat/completions", json=chat("chat-b"))
    assert r.status_code == 502 and "failed to allocate" in r.text
    assert harness.runtimes.spawn_count == 2  # retried once, not more
