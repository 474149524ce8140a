"""Embeddings across surfaces (issue 23): `/api/embed` on a KoboldCpp configuration is
translated to its OpenAI embeddings route, and OpenAI `/v1/embeddings` honours `dimensions`
as `/api/embed` does (the official `ollama` and `openai` clients, fake backends)."""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import ollama
import openai
import pytest

from tests.support.harness import RouterHarness

FULL = 8  # the fake backends' vector length


@pytest.fixture
async def harness(harness: RouterHarness) -> RouterHarness:
    """The root harness with this module's models."""
    h = harness
    h.model("kobold-embed", mode="kobold", embeddingsmodel="k-embed.gguf")
    h.model("embed", embeddingsmodel="embed.gguf")
    await h.start()
    return h


def base(h: RouterHarness) -> str:
    assert h.server is not None
    return str(h.server.make_url("")).rstrip("/")


def unit(vec: list[float]) -> bool:
    return math.isclose(math.sqrt(sum(x * x for x in vec)), 1.0, rel_tol=1e-6)


async def test_ollama_embed_on_koboldcpp(harness: RouterHarness) -> None:
    client = ollama.AsyncClient(host=base(harness))
    reply = await client.embed(model="kobold-embed", input=["a", "b"])
    assert reply.model == "kobold-embed"
    assert len(reply.embeddings) == 2 and len(reply.embeddings[0]) == FULL
    cut = await client.embed(model="kobold-embed", input="a", dimensions=3)
    assert len(cut.embeddings[0]) == 3 and unit(list(cut.embeddings[0]))


# Without encoding_format the openai client asks for base64 and decodes it itself (issue 36:
# the router passed base64 answers whole, 8 values where 4 were asked for).
FORMATS = [{"encoding_format": "float"}, {}]


@pytest.mark.parametrize("fmt", FORMATS, ids=["float", "base64"])
@pytest.mark.parametrize("model", ["embed", "kobold-embed"])
async def test_openai_embeddings_honour_dimensions(
    harness: RouterHarness, model: str, fmt: dict[str, Any]
) -> None:
    client = openai.AsyncOpenAI(base_url=base(harness) + "/v1", api_key="unused")
    full = await client.embeddings.create(model=model, input=["a", "b"], **fmt)
    assert [len(d.embedding) for d in full.data] == [FULL, FULL]
    cut = await client.embeddings.create(model=model, input=["a", "b"], dimensions=4, **fmt)
    assert cut.model == model
    assert [len(d.embedding) for d in cut.data] == [4, 4]
    assert all(unit(d.embedding) for d in cut.data)
    # The first values keep their direction: the cut vector is the full one's head, rescaled.
    head = full.data[0].embedding[:4]
    scale = cut.data[0].embedding[0] / head[0]
    assert all(
        math.isclose(c, h * scale, rel_tol=1e-6)
        for c, h in zip(cut.data[0].embedding, head, strict=True)
    )


async def test_bad_dimensions_are_refused(harness: RouterHarness) -> None:
    assert harness.client is not None
    r = await harness.client.post(
        "/v1/embeddings", json={"model": "embed", "input": "a", "dimensions": 0}
    )
    assert r.status_code == 400 and "dimensions" in r.text


async def test_a_base64_answer_is_cut_in_its_own_encoding(harness: RouterHarness) -> None:
    """On the wire the cut vector stays base64: 4 packed little-endian float32 values."""
    assert harness.client is not None
    body = {"model": "embed", "input": "a", "dimensions": 4, "encoding_format": "base64"}
    r = await harness.client.post("/v1/embeddings", json=body)
    assert r.status_code == 200, r.text
    raw = base64.b64decode(r.json()["data"][0]["embedding"])
    assert len(raw) == 4 * 4
    assert unit(list(struct.unpack("<4f", raw)))
