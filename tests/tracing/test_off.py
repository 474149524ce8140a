"""Tracing off costs nothing: a router process that serves a request without an OTLP endpoint
has imported no OpenTelemetry module (checked in a fresh interpreter, since this one has the
SDK loaded by the other tests), sends no X-Trace-Id and injects no traceparent; with the
endpoint set, the same script does import it (so the check can fail)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import asyncio, json, os, sys, tempfile
from pathlib import Path
from router import tracing
from tests.support.harness import RouterHarness, chat

async def main():
    tracing.enable_from_environment()  # what `tensor-router start` does first
    h = RouterHarness(Path(tempfile.mkdtemp()))
    h.model("m1")
    records = h.tmp / "requests.jsonl"
    h.faults["llamacpp"] = f"--record-requests {records}"
    client = await h.start()
    answer = await client.post("/v1/chat/completions", json=chat("m1", max_tokens=2))
    await h.close()
    sent = [r for r in h.records(records) if r.get("path") == "/v1/chat/completions"]
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    print(json.dumps({
        "status": answer.status_code,
        "trace_header": answer.headers.get("X-Trace-Id"),
        "traceparent": sent[-1].get("traceparent"),
        "loaded": loaded,
    }))
    sys.stdout.flush()
    os._exit(0)  # no exit-time flush of a tracer that has nowhere to send

asyncio.run(main())
"""


def _run(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture
def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_without_an_endpoint_no_opentelemetry_module_is_imported(
    clean_env: dict[str, str],
) -> None:
    result = _run(clean_env)
    assert result == {"status": 200, "trace_header": None, "traceparent": None, "loaded": []}


def test_with_an_endpoint_the_same_request_is_traced(clean_env: dict[str, str]) -> None:
    clean_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9/"
    clean_env["OTEL_BSP_SCHEDULE_DELAY"] = "600000"
    result = _run(clean_env)
    assert result["status"] == 200 and isinstance(result["trace_header"], str)
    assert isinstance(result["traceparent"], str)
    assert str(result["traceparent"]).split("-")[1] == result["trace_header"]
    assert "opentelemetry.sdk.trace" in result["loaded"]  # type: ignore[operator]
