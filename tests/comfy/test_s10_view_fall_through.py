"""S10 on the KoboldCpp fall-through: `/view` names the router did not mint go on to KoboldCpp
(the only backend with ComfyUI routes), so the filename and subfolder check is all that stands
between a traversal string and the backend. (With the check removed every test stayed green:
audit mutation M3c; the sd-server tests cannot see it, since nothing falls through there.)
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.harness import RouterHarness

TRAVERSALS = [
    "filename=../secret.txt",
    "filename=../../secret.txt",
    "filename=..%2F..%2Fsecret.txt",
    "filename=..%5C..%5Csecret.txt",
    "filename=%2Fetc%2Fpasswd",
    "filename=a%00.png",
    "filename=kliteimg_00001_.png&subfolder=..",
    "filename=kliteimg_00001_.png&subfolder=a%2F..%2F..",
    "filename=kliteimg_00001_.png&subfolder=%2Fetc",
    "filename=..",
]


async def _kobold(harness: RouterHarness, record: Path) -> httpx.AsyncClient:
    harness.faults["kobold"] = f"--record-requests {record}"
    harness.model("vid", mode="kobold", sdmodel="ltx.safetensors")
    client = await harness.start()
    r = await client.post("/router/v1/load", json={"model": "vid-ltx"})
    assert r.status_code == 200, r.text
    return client


def _views(harness: RouterHarness, record: Path) -> list[str]:
    return [x["path"] for x in harness.records(record) if x.get("path", "").endswith("/view")]


@pytest.mark.parametrize("query", TRAVERSALS)
async def test_s10_traversal_names_never_fall_through_to_koboldcpp(
    harness: RouterHarness, tmp_path: Path, query: str
) -> None:
    record = tmp_path / "kobold.jsonl"
    client = await _kobold(harness, record)
    r = await client.get(f"/view?{query}&type=output")
    assert r.status_code == 400, (r.status_code, r.text[:200])
    assert "error" in r.json()
    assert _views(harness, record) == []


async def test_s10_a_plain_name_the_router_did_not_mint_falls_through(
    harness: RouterHarness, tmp_path: Path
) -> None:
    """The control: the same route does reach KoboldCpp for a well-formed name."""
    record = tmp_path / "kobold.jsonl"
    client = await _kobold(harness, record)
    r = await client.get("/view?filename=kliteimg_00001_.png&type=output")
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert _views(harness, record) == ["/view"]


HTML = b"<html><script>alert(1)</script></html>"


async def test_s12_uploaded_html_is_never_served_as_html_in_koboldcpp_mode(
    harness: RouterHarness, tmp_path: Path
) -> None:
    """S12 where `/view` can fall through: the router keeps a copy of each upload (for its own
    video jobs) and must never serve it from `/view`; what falls through is KoboldCpp's own
    answer (its generated image: KoboldCpp never serves uploads by name). The router does not
    rewrite a fall-through answer's type: docs/reliability.md states this limit."""
    record = tmp_path / "kobold.jsonl"
    client = await _kobold(harness, record)
    boundary = "s12boundary"
    for name, ctype in (
        ("x.html", "text/html"),
        ("x.svg", "image/svg+xml"),
        ("x.mp4", "video/mp4"),
    ):
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{name}"\r\n'
                f"Content-Type: {ctype}\r\n\r\n"
            ).encode()
            + HTML
            + f"\r\n--{boundary}--\r\n".encode()
        )
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        up = await client.post("/upload/image", content=body, headers=headers)
        assert up.status_code == 200, up.text
        for kind in ("input", "output", "temp"):
            r = await client.get("/view", params={"filename": name, "type": kind})
            assert "html" not in r.headers.get("content-type", ""), (name, kind)
            assert "svg" not in r.headers.get("content-type", ""), (name, kind)
            assert HTML not in r.content, (name, kind)
    assert len(_views(harness, record)) == 9  # each fetch reached KoboldCpp: a real fall-through
