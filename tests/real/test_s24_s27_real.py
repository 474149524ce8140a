"""S24 and S27 with the real llama-server, launched by the router's supervisor.

S24: the backend listens on 127.0.0.1 only; its port refuses connections through this
machine's other addresses. S27: hostile sampler parameters are forwarded as sent; whatever
llama-server makes of them, the client gets an answer in the OpenAI shape (a crash of the
backend is a clean 502 and the next request relaunches it), and another client keeps being
served throughout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness
from tests.support.loopback_only import assert_loopback_only

pytestmark = [pytest.mark.real, pytest.mark.timeout(600)]

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Hello world, tell me a story."}]
NORMAL = {"model": "chat-a", "messages": MESSAGES, "max_tokens": 4, "temperature": 0}

# The matrix's four (GHSA-8947-pfff-2f3c, llama.cpp PR #24017) and their kin: negative
# lengths and windows, huge counts, out-of-range probabilities, a token id far outside the
# vocabulary. max_tokens -1 means "until the context is full" (2048 on the demo model).
HOSTILE: list[dict[str, Any]] = [
    {"n_discard": -1},
    {"n_probs": 1e9},
    {"dry_allowed_length": -5},
    {"max_tokens": -1},
    {"n_probs": 2_000_000_000, "stream": True},
    {"n_keep": -5},
    {"top_k": -1, "top_p": -0.5, "min_p": 2.0},
    {"temperature": -1},
    {"dry_multiplier": 1e308, "dry_penalty_last_n": -2},
    {"repeat_last_n": -7},
    {"logit_bias": [[999_999_999, 1.0]]},
    {"mirostat": 9, "mirostat_tau": -1},
    {"n_indent": -1, "t_max_predict_ms": -1},
]


async def test_s24_real_llama_server_listens_on_loopback_only(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    write_demo_text_kcpps(real_harness, demo_text)
    client = await real_harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    [pid] = real_harness.backend_pids()
    assert psutil.Process(pid).name() == "llama-server"
    assert_loopback_only(pid)


async def test_s27_hostile_sampler_parameters_on_real_llama_server(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    write_demo_text_kcpps(real_harness, demo_text)
    client = await real_harness.start()
    assert real_harness.server is not None
    base = str(real_harness.server.make_url(""))
    outcomes: list[tuple[str, int, bool]] = []
    async with httpx.AsyncClient(base_url=base, timeout=300) as bystander:
        assert (await bystander.post(CHAT, json=NORMAL)).status_code == 200
        for params in HOSTILE:
            [pid] = real_harness.backend_pids()
            r = await client.post(CHAT, json={**NORMAL, **params}, timeout=300)
            assert r.status_code in (200, 400, 422, 500, 502), (params, r.text[:300])
            if r.status_code != 200:
                error = r.json()["error"]  # the OpenAI shape, whoever refused
                assert isinstance(error["message"], str) and error["message"], r.text
            elif params.get("stream"):
                assert r.text.rstrip().endswith(("[DONE]", "}")), r.text[-300:]
            # The other client is served right after, by a relaunched backend if need be.
            served = await bystander.post(CHAT, json=NORMAL)
            assert served.status_code == 200, (params, served.text[:300])
            crashed = real_harness.backend_pids() != [pid]
            outcomes.append((str(params), r.status_code, crashed))
            if crashed and not params.get("stream"):
                # A backend that died under the request: a clean 502, not a reset or a hang.
                assert r.status_code in (200, 502), (params, r.status_code, r.text[:300])
    print("S27 outcomes (params, status, backend crashed):", *outcomes, sep="\n  ")
    assert real_harness.runtimes.spawn_count == 1 + sum(c for _, _, c in outcomes)
    [pid] = real_harness.backend_pids()
    assert psutil.Process(pid).name() == "llama-server"
