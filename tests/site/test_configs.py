"""Config-file routes and the catalog reload (router/api/site/configs.py) on a real router.

Every test runs the real app on a real socket with fake backends (tests/support/harness.py); waits are
for the `catalog` event on the router's event bus (or its /router/v1/events stream), bounded
for a busy 2-core machine where the disk watcher polls every 2 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.appkeys import EVENTS
from router.records.events import Event
from router.site import configs
from tests.support.harness import RouterHarness
from tests.support.site_helpers import EVENT_WAIT, catalog_event, client

SITE = "/router/v1/site/config-file"


@pytest.fixture
async def h(harness: RouterHarness) -> RouterHarness:
    harness.model("base")
    await harness.start()
    return harness


def listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def write_in_place(path: Path, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.write(data)
        fh.truncate()


def text_options(h: RouterHarness, name: str = "new.gguf", **extra: Any) -> dict[str, Any]:
    (h.models_dir / name).write_bytes(b"GGUF")
    return {"backend_mode": "llama_sdcpp", "model_param": str(h.models_dir / name), **extra}


async def model_ids(h: RouterHarness) -> list[str]:
    resp = await client(h).get("/v1/models")
    assert resp.status_code == 200
    return [m["id"] for m in resp.json()["data"]]


def assert_error(resp: httpx.Response, status: int, param: str | None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) >= {"message", "type", "param"}
    assert error["param"] == param
    return dict(error)


# ---- preview and apply --------------------------------------------------------------------------


async def test_preview_reports_refused_keys_and_writes_nothing(h: RouterHarness) -> None:
    before = listing(h.kcpps_dir)
    options = text_options(
        h, onready="rm -rf /", host="0.0.0.0", port=5001, sd_binary="/usr/bin/sd", contextsize=4096
    )
    resp = await client(h).post(f"{SITE}/preview", json={"id": "new", "options": options})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert {k: body[k] for k in ("node_id", "id", "filename", "would_overwrite")} == {
        "node_id": "local",
        "id": "new",
        "filename": "new.kcpps",
        "would_overwrite": False,
    }
    assert "node_url" in body
    assert set(body["options"]) == {"backend_mode", "model_param", "contextsize"}
    by_field = {f["field"]: f for f in body["validation"]}
    assert by_field["options.onready"]["code"] == "refused_key"
    assert by_field["options.sd_binary"]["code"] == "refused_key"
    assert by_field["options.host"]["code"] == "router_owned_key"
    assert all(
        set(f) == {"severity", "code", "message", "node_id", "field"} for f in body["validation"]
    )
    assert not any(f["severity"] == "error" for f in body["validation"])
    assert listing(h.kcpps_dir) == before


async def test_preview_warns_of_ignored_lanes_and_missing_files(h: RouterHarness) -> None:
    (h.models_dir / "pic.safetensors").write_bytes(b"SAFE")
    options = {
        "backend_mode": "vllm",
        "model_param": str(h.models_dir / "not-there.gguf"),
        "sdmodel": str(h.models_dir / "pic.safetensors"),
    }
    resp = await client(h).post(f"{SITE}/preview", json={"id": "v", "options": options})
    found = {(f["field"], f["code"], f["severity"]) for f in resp.json()["validation"]}
    assert found == {
        ("options.sdmodel", "lane_ignored", "warning"),
        ("options.model_param", "missing_file", "warning"),
    }


async def test_apply_writes_plain_kcpps_reloads_and_announces(h: RouterHarness) -> None:
    assert h.app is not None
    options = text_options(h, onready="echo hi", contextsize=4096)
    async with h.app[EVENTS].subscribe() as queue:
        resp = await client(h).post(
            f"{SITE}/apply", json={"filename": "new.kcpps", "options": options}
        )
        assert resp.status_code == 200, resp.text
        event = await catalog_event(queue, lambda e: "new" in e["added"])
    assert resp.json()["written"] is True
    written = json.loads((h.kcpps_dir / "new.kcpps").read_text())
    assert written == {k: v for k, v in options.items() if k != "onready"}
    assert "onready" not in (h.kcpps_dir / "new.kcpps").read_text()
    assert event["removed"] == [] and event["changed"] == []
    assert "new" in await model_ids(h)
    assert [n for n in listing(h.kcpps_dir) if n.startswith(".")] == []  # no temp file left


async def test_apply_event_reaches_the_events_stream(
    h: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert h.app is not None
    bus = h.app[EVENTS]
    subscribed = asyncio.Event()
    real_subscribe = bus.subscribe

    @contextlib.asynccontextmanager
    async def announced() -> AsyncIterator[asyncio.Queue[Event]]:
        async with real_subscribe() as queue:
            subscribed.set()  # the stream's handler subscribes after sending its headers
            yield queue

    monkeypatch.setattr(bus, "subscribe", announced)
    async with client(h).stream("GET", "/router/v1/events") as stream:
        await asyncio.wait_for(subscribed.wait(), EVENT_WAIT)
        resp = await client(h).post(
            f"{SITE}/apply", json={"id": "streamed", "options": text_options(h)}
        )
        assert resp.status_code == 200
        async with asyncio.timeout(EVENT_WAIT):
            kind = None
            async for line in stream.aiter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:") and kind == "catalog":
                    assert "streamed" in json.loads(line[5:])["added"]
                    break


async def test_apply_without_overwrite_is_409_and_keeps_the_file(h: RouterHarness) -> None:
    old = (h.kcpps_dir / "base.kcpps").read_bytes()
    body = {"id": "base", "options": text_options(h)}
    assert_error(await client(h).post(f"{SITE}/apply", json=body), 409, "overwrite")
    assert (h.kcpps_dir / "base.kcpps").read_bytes() == old
    preview = await client(h).post(f"{SITE}/preview", json=body)
    assert preview.json()["would_overwrite"] is True
    assert h.app is not None
    async with h.app[EVENTS].subscribe() as queue:
        resp = await client(h).post(f"{SITE}/apply", json={**body, "overwrite": True})
        assert resp.status_code == 200, resp.text
        await catalog_event(queue, lambda e: e["changed"] == ["base"])
    assert (h.kcpps_dir / "base.kcpps").read_bytes() == configs.render(body["options"])


async def test_invalid_options_are_400_naming_the_field_and_nothing_is_written(
    h: RouterHarness,
) -> None:
    before = listing(h.kcpps_dir)
    cases = [
        ({"model_param": "https://example.com/m.gguf"}, "options.model_param"),
        ({"contextsize": 4096}, "options"),  # no model component at all
        ({"model_param": "m.gguf", "backend_mode": "nope"}, "options.backend_mode"),
        ({"model_param": "m.gguf", "--model-param": "n.gguf"}, "options.--model-param"),
    ]
    for options, param in cases:
        resp = await client(h).post(f"{SITE}/apply", json={"id": "bad", "options": options})
        assert_error(resp, 400, param)
        preview = await client(h).post(f"{SITE}/preview", json={"id": "bad", "options": options})
        assert preview.status_code == 200
        assert any(f["severity"] == "error" for f in preview.json()["validation"])
    # A lone surrogate is valid JSON but no file name; it must not crash the writer.
    raw = b'{"id": "bad", "options": {"model_param": "m\\ud800.gguf"}}'
    for route in ("preview", "apply"):
        resp = await client(h).post(f"{SITE}/{route}", content=raw)
        assert resp.status_code == (200 if route == "preview" else 400), resp.text
    for body, param in [
        ({"id": "bad", "options": []}, "options"),
        ({"id": "bad", "options": {}, "overwrite": "yes"}, "overwrite"),
        ({"options": {}}, "id"),
        ({"id": "a", "filename": "b.kcpps"}, "filename"),
        ({"filename": "x.json"}, "filename"),
    ]:
        assert_error(await client(h).post(f"{SITE}/apply", json=body), 400, param)
    assert listing(h.kcpps_dir) == before


async def test_an_id_already_served_by_another_file_is_an_error(h: RouterHarness) -> None:
    h.model("sd", sdmodel="x.safetensors")  # image ID sd-x
    (h.models_dir / "y.gguf").write_bytes(b"GGUF")
    assert h.app is not None
    async with h.app[EVENTS].subscribe() as queue:
        await catalog_event(queue, lambda e: "sd" in e["added"])
    options = {"model_param": str(h.models_dir / "y.gguf")}
    resp = await client(h).post(f"{SITE}/apply", json={"id": "sd-x", "options": options})
    error = assert_error(resp, 400, "options")
    assert "sd.kcpps" in error["message"]
    assert not (h.kcpps_dir / "sd-x.kcpps").exists()


@pytest.mark.parametrize(
    "name", ["../x", "a/b", "/etc/passwd", "%2e%2e", "x\x00y", "x\ny", "x\x1by", "..", "a\\b", ""]
)
async def test_names_that_are_not_plain_file_names_are_400(h: RouterHarness, name: str) -> None:
    before = listing(h.kcpps_dir), listing(h.tmp)
    for field, value in (("id", name), ("filename", name + ".kcpps")):
        for route in ("preview", "apply"):
            body = {field: value, "options": text_options(h)}
            assert_error(await client(h).post(f"{SITE}/{route}", json=body), 400, field)
        resp = await client(h).request("DELETE", SITE, json={field: value})
        assert_error(resp, 400, field)
        resp = await client(h).delete(SITE, params={field: value})
        assert_error(resp, 400, field)
    assert (listing(h.kcpps_dir), listing(h.tmp)) == before


async def test_encoded_traversal_in_the_path_is_refused(h: RouterHarness) -> None:
    for path in (f"{SITE}/%2e%2e/apply", f"{SITE}/..%2fapply", "/router/v1/site/cook/%2e%2e"):
        resp = await client(h).request("DELETE", path)
        assert resp.status_code == 404, path


async def test_unknown_node_is_404_and_unknown_tail_404(h: RouterHarness) -> None:
    body = {"node_id": "elsewhere", "id": "new", "options": text_options(h)}
    assert_error(await client(h).post(f"{SITE}/apply", json=body), 404, "node_id")
    assert_error(
        await client(h).delete(SITE, params={"node_id": "elsewhere", "id": "base"}), 404, "node_id"
    )
    assert (h.kcpps_dir / "base.kcpps").exists() and not (h.kcpps_dir / "new.kcpps").exists()
    # config-file/{id} is a file to read (GET): another method is the table's 405
    other = await client(h).post(f"{SITE}/other", json={})
    assert other.status_code == 405 and other.headers["Allow"] == "GET, HEAD"
    assert (await client(h).post(f"{SITE}/other/more", json={})).status_code == 404
    assert (await client(h).get(f"{SITE}/apply")).status_code == 405


async def test_failed_rename_keeps_the_old_file_and_leaves_no_temp(
    h: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = (h.kcpps_dir / "base.kcpps").read_bytes()
    before = listing(h.kcpps_dir)
    real_replace = os.replace

    def crash(src: Any, dst: Any) -> None:
        if str(dst).endswith(".kcpps"):
            raise OSError(5, "simulated crash between temp file and rename")
        real_replace(src, dst)

    monkeypatch.setattr(configs.os, "replace", crash)
    body = {"id": "base", "overwrite": True, "options": text_options(h, contextsize=1)}
    resp = await client(h).post(f"{SITE}/apply", json=body)
    assert resp.status_code == 500
    assert (h.kcpps_dir / "base.kcpps").read_bytes() == old
    assert listing(h.kcpps_dir) == before  # the temp file went with the failure


async def test_body_cap_applies_and_oversized_files_are_refused(h: RouterHarness) -> None:
    huge = {"id": "big", "options": {"model_param": "m.gguf", "pad": "x" * (9 << 20)}}
    resp = await client(h).post(f"{SITE}/apply", json=huge)
    assert resp.status_code == 413  # limits.max_control_body_mb (8)
    big = {"id": "big", "options": {"model_param": "m.gguf", "pad": "x" * (2 << 20)}}
    error = assert_error(await client(h).post(f"{SITE}/apply", json=big), 400, "options")
    assert "larger than" in error["message"]  # the loader's own 1 MiB limit
    assert not (h.kcpps_dir / "big.kcpps").exists()


# ---- delete -------------------------------------------------------------------------------------


async def test_delete_by_body_and_by_query(h: RouterHarness) -> None:
    assert h.app is not None
    h.model("second")
    async with h.app[EVENTS].subscribe() as queue:
        await catalog_event(queue, lambda e: "second" in e["added"])
        resp = await client(h).request("DELETE", SITE, json={"id": "base"})
        assert resp.status_code == 200, resp.text
        assert resp.json() == {
            **resp.json(),
            "deleted": True,
            "id": "base",
            "filename": "base.kcpps",
        }
        await catalog_event(queue, lambda e: e["removed"] == ["base"])
        resp = await client(h).delete(SITE, params={"filename": "second.kcpps"})
        assert resp.status_code == 200, resp.text
        await catalog_event(queue, lambda e: e["removed"] == ["second"])
    assert not (h.kcpps_dir / "base.kcpps").exists()
    assert await model_ids(h) == []
    assert_error(await client(h).delete(SITE, params={"id": "base"}), 404, "filename")


# ---- files edited on disk -----------------------------------------------------------------------


async def test_file_written_in_place_on_disk_is_picked_up(h: RouterHarness) -> None:
    assert h.app is not None
    async with h.app[EVENTS].subscribe() as queue:
        (h.kcpps_dir / "edited.kcpps").write_bytes(configs.render(text_options(h)))
        await catalog_event(queue, lambda e: "edited" in e["added"])
        assert "edited" in await model_ids(h)
        # an editor saving in place: same inode, rewritten and truncated
        write_in_place(
            h.kcpps_dir / "edited.kcpps", configs.render(text_options(h, contextsize=2048))
        )
        await catalog_event(queue, lambda e: "edited" in e["changed"])
        (h.kcpps_dir / "edited.kcpps").unlink()
        await catalog_event(queue, lambda e: "edited" in e["removed"])
    assert "edited" not in await model_ids(h)


async def test_file_replaced_by_rename_on_disk_is_picked_up(h: RouterHarness) -> None:
    assert h.app is not None
    async with h.app[EVENTS].subscribe() as queue:
        temp = h.kcpps_dir / ".renamed.kcpps.swp"  # editors' temp names are dotfiles: skipped
        temp.write_bytes(configs.render(text_options(h)))
        os.replace(temp, h.kcpps_dir / "renamed.kcpps")
        await catalog_event(queue, lambda e: "renamed" in e["added"])
        temp.write_bytes(configs.render(text_options(h, "other.gguf")))
        os.replace(temp, h.kcpps_dir / "base.kcpps")
        event = await catalog_event(queue, lambda e: "base" in e["changed"])
    assert event["removed"] == []
    assert {"renamed", "base"} <= set(await model_ids(h))


async def test_a_running_runtime_keeps_its_config_until_reloaded(h: RouterHarness) -> None:
    resp = await client(h).post("/router/v1/load", json={"model": "base"})
    assert resp.status_code == 200, resp.text
    (runtime,) = h.runtimes.runtimes()
    pid = runtime.process.pid if runtime.process else None
    body = {"id": "base", "overwrite": True, "options": text_options(h, contextsize=1234)}
    assert (await client(h).post(f"{SITE}/apply", json=body)).status_code == 200
    chat = {"model": "base", "messages": [{"role": "user", "content": "hi"}]}
    assert (await client(h).post("/v1/chat/completions", json=chat)).status_code == 200
    (still,) = h.runtimes.runtimes()
    assert still is runtime and (still.process.pid if still.process else None) == pid
    assert "contextsize" not in still.config.raw  # the old config, until the next load
    await client(h).post("/router/v1/unload", json={})
    assert (await client(h).post("/router/v1/load", json={"model": "base"})).status_code == 200
    (fresh,) = h.runtimes.runtimes()
    assert fresh.config.raw["contextsize"] == 1234


async def test_a_target_that_is_not_a_regular_file_is_409_and_left_alone(h: RouterHarness) -> None:
    elsewhere = h.tmp / "elsewhere.kcpps"
    elsewhere.write_bytes(b"{}")
    (h.kcpps_dir / "link.kcpps").symlink_to(elsewhere)
    os.mkfifo(h.kcpps_dir / "pipe.kcpps")  # reading it would block the worker thread
    for name in ("link", "pipe"):
        body = {"id": name, "overwrite": True, "options": text_options(h)}
        assert_error(await client(h).post(f"{SITE}/apply", json=body), 409, "filename")
        assert_error(await client(h).delete(SITE, params={"id": name}), 409, "filename")
    assert (h.kcpps_dir / "link.kcpps").is_symlink() and elsewhere.read_bytes() == b"{}"


# ---- the catalog's change hook ------------------------------------------------------------------


async def test_catalog_reports_each_change_once(tmp_path: Path) -> None:
    from router.config import Catalog, CatalogChange
    from router.domain import BackendMode

    seen: list[CatalogChange] = []
    catalog = Catalog(tmp_path, BackendMode.LLAMA_SDCPP, on_change=seen.append)
    (tmp_path / "a.kcpps").write_text('{"model_param": "a.gguf"}')
    await catalog.refresh()
    await catalog.refresh()  # nothing changed: no call
    assert [c.added for c in seen] == [("a",)]
    (tmp_path / "b.kcpps").write_text("{not json")
    await catalog.refresh()  # only the errors changed
    assert seen[-1].added == () and "b.kcpps" in seen[-1].errors
    (tmp_path / "a.kcpps").unlink()
    await catalog.refresh()
    assert seen[-1].removed == ("a",) and len(seen) == 3
    await catalog.close()


async def test_admin_role_only(harness: RouterHarness) -> None:
    from router.config.schema import AuthSection, SecuritySection

    base = harness.settings()
    await harness.start(
        base.model_copy(
            update={
                "security": SecuritySection(profile="secure"),
                "auth": AuthSection(inference_keys=("user-key",), admin_keys=("admin-key",)),
            }
        )
    )
    body = {"id": "new", "options": text_options(harness)}
    for headers, status in (({}, 401), ({"Authorization": "Bearer user-key"}, 403)):
        for route in ("config-file/apply", "cook/apply"):
            resp = await client(harness).post(
                f"/router/v1/site/{route}", json=body, headers=headers
            )
            assert resp.status_code == status, (route, resp.text)
    admin = {"Authorization": "Bearer admin-key"}
    resp = await client(harness).post(f"{SITE}/apply", json=body, headers=admin)
    assert resp.status_code == 200, resp.text


# ---- reading a file back (the WebUI's Config page and the Models detail) ----------------------


async def test_get_config_file_reads_back_screened_options_and_a_sanitized_copy(
    h: RouterHarness,
) -> None:
    path = h.kcpps_dir / "base.kcpps"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "onready": "rm -rf ~", "port": 5001, "password": "pw"}))
    resp = await client(h).get(f"{SITE}/base")
    assert resp.status_code == 200
    body = resp.json()
    assert body["id"] == "base" and body["filename"] == "base.kcpps"
    assert body["options"] == raw  # what an apply would write back: screened keys gone
    assert body["sanitized"]["model_param"] == "base.gguf"  # the directory is not shown
    codes = {(f["code"], f["field"]) for f in body["validation"]}
    assert ("refused_key", "options.onready") in codes
    assert ("router_owned_key", "options.port") in codes
    assert "pw" not in resp.text and "rm -rf" not in resp.text
    assert body["config_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("name", "status"),
    # a%2fb arrives as two segments: no config-file route has two, so the table's 404
    [("nope", 404), ("..", 404), ("a%2fb", 404), ("bad name", 400), ("-x", 400)],
)
async def test_get_config_file_refuses_unknown_and_unsafe_names(
    h: RouterHarness, name: str, status: int
) -> None:
    assert (await client(h).get(f"{SITE}/{name}")).status_code == status


async def test_get_config_file_of_a_broken_file_is_a_conflict(h: RouterHarness) -> None:
    (h.kcpps_dir / "broken.kcpps").write_text("[1, 2")
    resp = await client(h).get(f"{SITE}/broken")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "invalid_config"
