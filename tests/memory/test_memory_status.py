"""GET /router/v1/status shows each runtime's memory figure and the devices (read-only).

A real router with the fake backend (tests/harness.py); the .kcpps points at a real demo GGUF
so the estimate is the one docs/residency.md works through."""

from __future__ import annotations

from router.appkeys import FIGURES, SETTINGS
from router.demo_models import write_llama_gguf
from router.memory.estimate import PROCESS_OVERHEAD, LlamaOptions, llama_footprint
from router.memory.figures import NoFigures
from router.memory.shape import read_shape
from router.runtime.holdings import Holdings
from tests.support.harness import RouterHarness

GIB = 1 << 30


async def test_status_carries_memory_and_devices(harness: RouterHarness) -> None:
    harness.model("chat-a", gpulayers=0)  # the host, also on a machine with GPUs
    model = harness.models_dir / "chat-a.gguf"
    write_llama_gguf(model, seed=1, name="chat a")  # the fake backend never reads it
    client = await harness.start(
        harness.settings().model_copy(
            update={"memory": harness.settings().memory.model_copy(update={"host_budget": 2 * GIB})}
        )
    )
    before = (await client.get("/router/v1/status")).json()
    assert before["runtimes"] == []
    (host,) = [d for d in before["devices"] if d["device"] == "host"]
    assert host == {"device": "host", "budget": 2 * GIB, "used": 0, "free": 2 * GIB, "kind": "host"}

    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    assert harness.app is not None
    # The live ledger as it is before any measurement (holdings without figures).
    book = Holdings(harness.app[SETTINGS], NoFigures())
    ledger = book.ledger(book.resident(rt, 0) for rt in harness.runtimes.runtimes())
    shape = read_shape(str(model))
    assert shape is not None
    expected = llama_footprint(shape, LlamaOptions(gpu_layers=0)).total
    assert expected > PROCESS_OVERHEAD["llamacpp"]
    # Before any measurement (no figures): the estimate docs/residency.md works through.
    estimated, rows = book.status(ledger)
    assert [{k: v[k] for k in ("device", "bytes", "source")} for v in estimated.values()] == [
        {"device": "host", "bytes": expected, "source": "estimate"}
    ]
    (host,) = [d for d in rows if d["device"] == "host"]
    assert (host["used"], host["free"]) == (expected, 2 * GIB - expected)

    # Once the load is measured (the fake backend prints no report: its RSS), the status
    # shows the measured figure in the estimate's place.
    figures = harness.app[FIGURES]
    await figures.settled()
    latest = figures.book.latest("chat-a")
    assert latest is not None
    measured = latest[1].measured.total
    status = (await client.get("/router/v1/status")).json()
    (runtime,) = status["runtimes"]
    assert runtime["memory"] == {"device": "host", "bytes": measured, "source": "measured"}
    (host,) = [d for d in status["devices"] if d["device"] == "host"]
    assert (host["used"], host["free"]) == (measured, 2 * GIB - measured)
