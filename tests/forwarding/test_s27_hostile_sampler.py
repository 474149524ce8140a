"""S27 through the router with a backend that dies on a hostile sampler value.

The real llama-server of this build refuses or survives every hostile value we send it
(tests/real/test_s24_s27_real.py); older builds crashed on some (GHSA-8947-pfff-2f3c). The
fake backend's `--crash-on-field n_probs` stands in for such a build: the router forwards the
body as sent, the client gets a clean 502 in the OpenAI shape (no reset, no hang), the next
request relaunches the backend, and another client is served throughout.
"""

from __future__ import annotations

import json

import httpx

from tests.support.harness import RouterHarness, chat

CHAT = "/v1/chat/completions"
HOSTILE = [{"n_probs": 1e9}, {"n_probs": -1, "n_discard": -1}, {"n_probs": 10**12, "stream": True}]


async def test_s27_a_backend_crashing_on_hostile_parameters_is_a_502_and_a_restart(
    harness: RouterHarness,
) -> None:
    record = harness.tmp / "bodies.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--crash-on-field n_probs --record-bodies {record}"
    client = await harness.start()
    assert harness.server is not None
    async with httpx.AsyncClient(base_url=str(harness.server.make_url("")), timeout=30) as other:
        assert (await other.post(CHAT, json=chat("chat-a", max_tokens=2))).status_code == 200
        for params in HOSTILE:
            pids = harness.backend_pids()
            body = {**chat("chat-a", max_tokens=2), **params}
            r = await client.post(CHAT, json=body)
            assert harness.backend_pids() != pids or not harness.backend_pids()
            if params.get("stream"):  # headers may have gone out: the stream ends in error
                assert r.status_code in (200, 502), r.text
                assert '"error"' in r.text and "[DONE]" not in r.text, r.text
            else:
                assert r.status_code == 502, r.text
                assert r.json()["error"]["type"] == "upstream_error", r.text
            # The other client is served at once, by the relaunched backend.
            served = await other.post(CHAT, json=chat("chat-a", max_tokens=2))
            assert served.status_code == 200, served.text
            assert harness.backend_pids() and harness.backend_pids() != pids
    # The hostile values reached the backend as sent (the router forwards, it does not
    # filter). Each at most twice: a backend that died before answering is relaunched and sent
    # the request once more (router/api/inference/serving.py `_backend_died`, for a pooled connection
    # to a backend killed just before), which cannot tell a body that killed it.
    sent = [line for line in record.read_text().splitlines() if "n_probs" in line]
    assert len(HOSTILE) <= len(sent) <= 2 * len(HOSTILE)
    for params in HOSTILE:
        assert any(f'"n_probs": {json.dumps(params["n_probs"])}' in line for line in sent)
