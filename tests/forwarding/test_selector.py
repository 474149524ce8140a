"""Selector: S26 hostile JSON, prefix scanning, multipart, precedence, and exact body replay."""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from aiohttp import FormData, web
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, MultiDict

from router.classify import IMAGE_SELECTOR, TEXT_SELECTOR, match
from router.errors import BadRequest, RouterError, render
from router.forwarding import (
    body_kind,
    body_stream,
    boundary_of,
    read_selector,
    select_from_body,
    select_from_request_parts,
)
from router.forwarding.body_selector import (
    MAX_MODEL_BYTES,
    scan_json_prefix,
    select_from_json,
    select_from_multipart,
)

MODEL = ("model",)
IMAGE_KEYS = IMAGE_SELECTOR.json_keys


# ---- S26: hostile JSON ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"[1, 2]", "JSON object"),
        (b'"hermes"', "JSON object"),
        (b"42", "JSON object"),
        (b"null", "JSON object"),
        (b'{"model": "a\xff"}', "UTF-8"),
        (b"\xef\xbb\xbf{}", "JSON object"),  # a BOM is not JSON whitespace
        (b'{"model": "x"', "not valid JSON"),
        (b'{"model": "x"} trailing', "not valid JSON"),
        (b'{"model": {"name": "x"}}', "must be a string"),
        (b'{"model": 7}', "must be a string"),
        (b'{"model": ["a"]}', "must be a string"),
        (b'{"model": true}', "must be a string"),
        (b'{"model": "a\\u0000b"}', "control"),
        (b'{"model": "\\ud800"}', "control or invalid"),
        (b'{"n": ' + b"9" * 5000 + b"}", "number is too long"),
        (b'{"model": "' + b"m" * (MAX_MODEL_BYTES + 1) + b'"}', "longer than"),
    ],
)
def test_bad_json_bodies_are_400(body, needle):
    with pytest.raises(BadRequest) as info:
        select_from_json(body, MODEL)
    assert needle in info.value.message and info.value.status == 400


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_deep_nesting_is_a_fast_400_not_a_recursion_error(depth):
    for opener, closer in ((b"[", b"]"), (b'{"a":', b"}")):
        body = b'{"x":' + opener * depth + closer * depth + b"}"
        started = time.monotonic()
        with pytest.raises(BadRequest, match="nested too deeply"):
            select_from_json(body, MODEL)
        with pytest.raises(BadRequest, match="nested too deeply"):
            scan_json_prefix(body, MODEL)
        assert time.monotonic() - started < 2.0


def test_million_element_array_is_parsed():
    body = b'{"input": [' + b"1," * 1_000_000 + b'1], "model": "embed"}'
    assert select_from_json(body, MODEL) == "embed"


def test_duplicate_keys_last_wins_in_both_modes():
    body = b'{"model": "first", "x": 1, "model": "second"}'
    assert select_from_json(body, MODEL) == "second"
    assert scan_json_prefix(body, MODEL) == "second"
    # within a prefix the last occurrence seen wins; a cut-off later value does not count
    assert scan_json_prefix(b'{"model": "first", "model": "sec', MODEL) == "first"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", None),
        (b"  \n", None),
        (b"{}", None),
        (b'{"model": null}', None),
        (b'{"model": ""}', None),
        (b'{"model": "  "}', None),
        (b'{"messages": []}', None),
        (b'{"model": "hermes-8k"}', "hermes-8k"),
        (b' {"model":"\xc3\xa9t\xc3\xa9"} ', "\u00e9t\u00e9"),
    ],
)
def test_good_json_bodies(body, expected):
    assert select_from_json(body, MODEL) == expected


def test_image_aliases_in_rule_order():
    both = b'{"override_settings": {"sd_model_checkpoint": "b"}, "sd_model_checkpoint": "a"}'
    assert select_from_json(both, IMAGE_KEYS) == "a"
    nested = b'{"override_settings": {"sd_model_checkpoint": "b"}}'
    assert select_from_json(nested, IMAGE_KEYS) == "b"
    assert scan_json_prefix(nested, IMAGE_KEYS) == "b"
    # a non-object parent is simply not a selector; the backend judges the rest of the body
    assert select_from_json(b'{"override_settings": 3}', IMAGE_KEYS) is None
    with pytest.raises(BadRequest, match="override_settings.sd_model_checkpoint"):
        select_from_json(b'{"override_settings": {"sd_model_checkpoint": 1}}', IMAGE_KEYS)


# ---- prefix scanning ---------------------------------------------------------------------------


def test_prefix_finds_model_after_large_values_without_parsing_the_rest():
    body = b'{"messages": [{"role": "user", "content": "' + b"x" * 50_000 + b'"}], "model": "m"'
    assert scan_json_prefix(body + b', "rest": [1, 2, {"unfinished', MODEL) == "m"


@pytest.mark.parametrize(
    "prefix",
    [
        b'{"messages": [1, 2, 3',  # cut inside a value before the model
        b'{"model": "herm',  # the model itself is cut
        b'{"model"',
        b'{"model": ',
        b"{",
        b'{"a": 1, ',
        b'{"a" 1, "model": "x"}',  # malformed: the scan stops, the backend will judge
    ],
)
def test_prefix_without_complete_selector_is_none(prefix):
    assert scan_json_prefix(prefix, MODEL) is None


def test_prefix_may_end_inside_a_utf8_character_but_not_contain_bad_bytes():
    assert scan_json_prefix(b'{"model": "m", "t": "\xc3', MODEL) == "m"
    assert scan_json_prefix(b'{"model": "m", "t": "\xe2\x82', MODEL) == "m"
    with pytest.raises(BadRequest, match="UTF-8"):
        scan_json_prefix(b'{"model": "m", "t": "\xff more"', MODEL)
    with pytest.raises(BadRequest, match="JSON object"):
        scan_json_prefix(b"[" + b"1," * 100, MODEL)
    with pytest.raises(BadRequest, match="must be a string"):
        scan_json_prefix(b'{"model": {"a": 1}, "x": "unfinished', MODEL)


_json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(
    before=st.dictionaries(
        st.text(max_size=6).filter(lambda k: k != "model"), _json_value, max_size=4
    ),
    model=st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x2FFF, exclude_characters="\x7f"),
        min_size=1,
        max_size=20,
    ).filter(str.strip),
    after=st.dictionaries(
        st.text(max_size=6).filter(lambda k: k != "model"), _json_value, max_size=4
    ),
    cut=st.integers(min_value=0, max_value=10_000),
)
def test_prefix_scan_agrees_with_full_parse(before, model, after, cut):
    obj = {**before, "model": model, **after}
    body = json.dumps(obj, ensure_ascii=False).encode()
    assert select_from_json(body, MODEL) == model
    assert scan_json_prefix(body, MODEL) == model
    # any cut either finds the same model or none; it never invents another
    assert scan_json_prefix(body[: min(cut, len(body))], MODEL) in (None, model)


@settings(max_examples=500, deadline=None)
@given(body=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_fuzz_json_only_returns_or_raises_bad_request(body):
    _str_none_or_bad_request(body)


def _str_none_or_bad_request(body: bytes) -> None:
    for fn in (select_from_json, scan_json_prefix):
        try:
            result = fn(body, IMAGE_KEYS)
        except BadRequest:
            continue
        assert result is None or isinstance(result, str)


@settings(max_examples=300, deadline=None)
@given(
    body=st.lists(
        st.sampled_from(
            ["{", "}", "[", "]", '"model"', ":", ",", '"m"', "1", "null", " ", '"\\u', "\\"]
        ),
        max_size=40,
    ).map(lambda parts: "".join(parts).encode())
)
def test_fuzz_json_shaped_tokens(body):
    _str_none_or_bad_request(body)


# ---- multipart ----------------------------------------------------------------------------------


def _form(*parts: tuple[str, bytes, str | None], boundary: str = "XyZ123") -> bytes:
    out = b""
    for name, value, filename in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + value + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def test_multipart_field_found_before_and_after_files():
    audio = b"RIFF" + bytes(range(256)) * 40
    first = _form(("model", b"whisper-small", None), ("file", audio, "a.wav"))
    last = _form(("file", audio, "a.wav"), ("model", b"whisper-small", None))
    assert select_from_multipart(first, "XyZ123") == "whisper-small"
    assert select_from_multipart(last, "XyZ123") == "whisper-small"
    # a file whose field is called "model" is not a selector
    assert select_from_multipart(_form(("model", b"bytes", "model.bin")), "XyZ123") is None


def test_multipart_prefix_and_repeats():
    body = _form(
        ("model", b"one", None), ("file", b"\x00" * 5000, "a.wav"), ("model", b"two", None)
    )
    assert select_from_multipart(body, "XyZ123") == "two"
    assert select_from_multipart(body[:3000], "XyZ123") == "one"  # the second is past the prefix
    assert select_from_multipart(body[:40], "XyZ123") is None  # the first is cut
    assert select_from_multipart(b"no delimiters at all", "XyZ123") is None
    with pytest.raises(BadRequest, match="UTF-8"):
        select_from_multipart(_form(("model", b"\xff\xfe", None)), "XyZ123")


def test_boundary_and_body_kind():
    assert boundary_of('multipart/form-data; boundary="a b:c"') == "a b:c"
    assert boundary_of("multipart/form-data; charset=utf-8; BOUNDARY=----xyz") == "----xyz"
    assert boundary_of("multipart/form-data") is None
    assert boundary_of("multipart/form-data; boundary=" + "a" * 71) is None
    assert body_kind("Multipart/Form-Data; boundary=x") == "multipart"
    assert body_kind("audio/wav") == body_kind("application/octet-stream") == "sniff"
    for ctype in ("application/json", "text/plain", "", "application/x-www-form-urlencoded"):
        assert body_kind(ctype) == "json"
    assert body_kind("application/vnd.api+json; charset=utf-8") == "json"
    with pytest.raises(BadRequest, match="boundary"):
        select_from_body(b"--x\r\n", True, "multipart/form-data", IMAGE_SELECTOR)
    # other types are parsed only when they start like a JSON object
    assert select_from_body(b"\xff\x00", True, "audio/wav", IMAGE_SELECTOR) == (None, None)
    assert select_from_body(b"[1]", True, "application/octet-stream", IMAGE_SELECTOR) == (
        None,
        None,
    )
    with pytest.raises(BadRequest):
        select_from_body(b'{"model": 1}', True, "application/octet-stream", IMAGE_SELECTOR)
    sniffed = select_from_body(b' {"model": "m"}', True, "application/octet-stream", IMAGE_SELECTOR)
    assert sniffed == ("m", "json:model")
    with pytest.raises(BadRequest):
        select_from_body(b"[1]", True, "text/plain", IMAGE_SELECTOR)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=400), boundary=st.sampled_from(["b", "XyZ123", "--"]))
def test_fuzz_multipart(body, boundary):
    try:
        result = select_from_multipart(body, boundary)
    except BadRequest:
        return
    assert result is None or isinstance(result, str)


# ---- precedence (pure) -------------------------------------------------------------------------


def test_precedence_body_then_query_then_header():
    q = MultiDict([("model", "q1"), ("model", "q2")])
    h = CIMultiDict([("X-Tensors-Model", "h1"), ("x-tensors-model", "h2")])
    rule = TEXT_SELECTOR
    assert select_from_request_parts(rule, ("b", "json:model"), q, h) == ("b", "json:model")
    assert select_from_request_parts(rule, (None, None), q, h) == ("q2", "query:model")
    assert select_from_request_parts(rule, (None, None), MultiDict(), h) == ("h2", "header")
    assert select_from_request_parts(rule, (None, None), MultiDict(), CIMultiDict()) == (None, None)
    img = MultiDict([("sd_model_checkpoint", "sdxl")])
    assert select_from_request_parts(IMAGE_SELECTOR, (None, None), img, h)[0] == "sdxl"
    assert select_from_request_parts(rule, (None, None), img, h)[0] == "h2"  # text: no alias


# ---- read_selector + body_stream over real sockets ------------------------------------------------

SCAN = 4096
SCAN_KEY = web.AppKey("scan", int)


async def _echo(request: web.Request) -> web.StreamResponse:
    """Classify, select, then re-read the body exactly as the proxy would forward it."""
    m = match(request.method, request.path)
    try:
        selection = await read_selector(request, m.route, request.app[SCAN_KEY])
        digest, size = hashlib.sha256(), 0
        async for chunk in body_stream(
            selection, request, limit=int(request.headers.get("X-Test-Limit", 1 << 22))
        ):
            digest.update(chunk)
            size += len(chunk)
    except RouterError as err:
        return render(err, m.route.surface)
    return web.json_response(
        {
            "model": selection.model,
            "source": selection.source,
            "complete": selection.complete,
            "prefix": len(selection.prefix),
            "sha": digest.hexdigest(),
            "size": size,
        }
    )


@pytest.fixture
async def client(aiohttp_client):
    app = web.Application(client_max_size=1 << 30)
    app[SCAN_KEY] = SCAN
    app.router.add_route("*", "/{path:.*}", _echo)
    return await aiohttp_client(app)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_small_json_body_is_complete_and_replayed(client):
    body = json.dumps(
        {"model": "hermes-8k", "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    resp = await client.post(
        "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    got = await resp.json()
    assert got["model"] == "hermes-8k" and got["source"] == "json:model" and got["complete"]
    assert got["sha"] == _sha(body) and got["size"] == len(body)


async def test_large_body_is_scanned_as_a_prefix_and_replayed_exactly(client):
    body = b'{"model": "big", "prompt": "' + b"z" * 200_000 + b'"}'
    resp = await client.post("/v1/completions", data=body)
    got = await resp.json()
    assert got == {
        "model": "big",
        "source": "json:model",
        "complete": False,
        "prefix": SCAN,
        "sha": _sha(body),
        "size": len(body),
    }


async def test_selector_beyond_the_limit_falls_back_to_query_then_header(client):
    body = b'{"prompt": "' + b"z" * 10_000 + b'", "model": "late"}'
    got = await (await client.post("/v1/completions?model=fromquery", data=body)).json()
    assert (got["model"], got["source"], got["sha"]) == ("fromquery", "query:model", _sha(body))
    resp = await client.post("/v1/completions", data=body, headers={"X-Tensors-Model": "fromhdr"})
    assert (await resp.json())["model"] == "fromhdr"
    assert (await (await client.post("/v1/completions", data=body)).json())["model"] is None


async def test_body_beats_query_beats_header(client):
    headers = {"X-Tensors-Model": "hdr"}
    got = await (
        await client.post("/api/chat?model=q", data=b'{"model":"b"}', headers=headers)
    ).json()
    assert got["model"] == "b"
    got = await (await client.post("/api/chat?model=q", data=b"{}", headers=headers)).json()
    assert got["model"] == "q"
    got = await (await client.get("/props", headers=headers)).json()
    assert (got["model"], got["complete"], got["size"]) == ("hdr", True, 0)


async def test_chunked_upload_is_replayed_exactly(client):
    pieces = [b'{"model": "chunky", "input": [', *[b"1, " for _ in range(20_000)], b"2]}"]

    async def gen():
        for piece in pieces:
            yield piece

    resp = await client.post("/v1/embeddings", data=gen())
    got = await resp.json()
    body = b"".join(pieces)
    assert (got["model"], got["complete"], got["sha"], got["size"]) == (
        "chunky",
        False,
        _sha(body),
        len(body),
    )


async def test_multipart_audio_upload(client):
    form = FormData()
    form.add_field("model", "whisper-base")
    form.add_field("file", b"RIFF" + b"\x01" * 30_000, filename="a.wav", content_type="audio/wav")
    resp = await client.post("/v1/audio/transcriptions", data=form)
    got = await resp.json()
    assert (got["model"], got["source"], got["complete"]) == ("whisper-base", "form:model", False)
    assert got["size"] > 30_000


async def test_image_alias_from_json_and_query(client):
    body = b'{"prompt": "cat", "override_settings": {"sd_model_checkpoint": "sdxl-juggernautXL"}}'
    got = await (await client.post("/sdapi/v1/txt2img", data=body)).json()
    assert (got["model"], got["source"]) == (
        "sdxl-juggernautXL",
        "json:override_settings.sd_model_checkpoint",
    )
    got = await (await client.get("/sdapi/v1/loras?sd_model_checkpoint=sd15")).json()
    assert got["model"] == "sd15"


async def test_hostile_body_is_a_400_in_the_surface_shape(client):
    resp = await client.post("/v1/chat/completions", data=b'{"model": {"$gt": ""}}')
    assert resp.status == 400
    assert "must be a string" in (await resp.json())["error"]["message"]
    resp = await client.post(
        "/api/chat", data=b"[" * 100_000, headers={"Content-Type": "text/plain"}
    )
    assert resp.status == 400 and "JSON object" in (await resp.json())["error"]


async def test_control_bodies_are_left_for_the_handler(client):
    body = b'{"model": "hermes-8k"}'
    got = await (await client.post("/router/v1/load", data=body)).json()
    assert (got["model"], got["prefix"], got["complete"]) == (None, 0, False)
    assert got["sha"] == _sha(body)


async def test_binary_bodies_are_not_parsed(client):
    body = bytes(range(256)) * 100
    got = await (
        await client.post(
            "/v1/audio/speech?model=tts",
            data=body,
            headers={"Content-Type": "application/octet-stream"},
        )
    ).json()
    assert (got["model"], got["sha"]) == ("tts", _sha(body))


async def test_body_stream_limit(client):
    body = b'{"model": "m", "p": "' + b"a" * 20_000 + b'"}'
    resp = await client.post("/v1/completions", data=body, headers={"X-Test-Limit": "10000"})
    assert resp.status == 413
    resp = await client.post("/v1/completions", data=body, headers={"X-Test-Limit": "100"})
    assert resp.status == 413  # the kept prefix alone is over the limit
    resp = await client.post("/v1/completions", data=body, headers={"X-Test-Limit": str(len(body))})
    assert resp.status == 200
