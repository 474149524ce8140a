"""/metrics exports the memory GET /router/v1/status shows: each device's budget and use and
each runtime's bytes, read at scrape time from the same snapshot (the manager's memory_now()).

A real router with the fake backend; the .kcpps point at real demo GGUFs (a chat model on the
text lane, an embedding model on the embeddings lane) so the estimates are real ones."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from router.demo_models import write_bert_gguf, write_llama_gguf
from tests.support.harness import RouterHarness, until

GIB = 1 << 30


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


async def test_metrics_carry_the_status_memory(harness: RouterHarness) -> None:
    harness.model("chat-a", gpulayers=0)
    harness.model("embed", embeddingsmodel="embed.gguf", gpulayers=0)
    write_llama_gguf(harness.models_dir / "chat-a.gguf", seed=1, name="chat a")
    write_bert_gguf(harness.models_dir / "embed.gguf", seed=2)
    base = harness.settings()
    memory = base.memory.model_copy(update={"host_budget": 2 * GIB})
    client = await harness.start(base.model_copy(update={"memory": memory}))

    empty = (await client.get("/metrics")).text
    assert _samples(empty, "tensor_router_memory_budget_bytes")[
        (("device", "host"), ("kind", "host"))
    ] == float(2 * GIB)
    assert (
        _samples(empty, "tensor_router_memory_used_bytes")[(("device", "host"), ("kind", "host"))]
        == 0.0
    )
    assert _samples(empty, "tensor_router_runtime_memory_bytes") == {}

    for model in ("chat-a", "embed"):
        r = await client.post("/router/v1/load", json={"model": model})
        assert r.status_code == 200, r.text

    async def sources() -> list[str]:
        runtimes = (await client.get("/router/v1/status")).json()["runtimes"]
        return [rt["memory"]["source"] for rt in runtimes]

    # Each backend process is measured just after its load: compare once both figures are in.
    assert await until(sources, ["measured", "measured"])
    status = (await client.get("/router/v1/status")).json()
    text = (await client.get("/metrics")).text

    held = _samples(text, "tensor_router_runtime_memory_bytes")
    expected = {}
    for rt in status["runtimes"]:
        mem = rt["memory"]
        labels = {"model": rt["model"], "lane": rt["lanes"][0], **mem}
        labels.pop("bytes")
        expected[tuple(sorted(labels.items()))] = float(mem["bytes"])
    assert len(expected) == 2 and held == expected
    assert {dict(k)["lane"] for k in held} == {"text", "embeddings"}
    for row in status["devices"]:
        key = (("device", row["device"]), ("kind", row["kind"]))
        assert _samples(text, "tensor_router_memory_budget_bytes")[key] == float(row["budget"])
        assert _samples(text, "tensor_router_memory_used_bytes")[key] == float(row["used"])
    (host,) = [d for d in status["devices"] if d["device"] == "host"]
    assert host["used"] == sum(held.values()) > 0

    await client.post("/router/v1/unload", json={"target": "all"})
    after = (await client.get("/metrics")).text
    assert _samples(after, "tensor_router_runtime_memory_bytes") == {}
