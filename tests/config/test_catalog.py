"""Catalog: rescans, malformed files, ID clashes, hashing cache, availability, disabled state."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import router.config.catalog as catalog_mod
from router.config import Catalog
from router.domain import BackendMode


def write(folder: Path, name: str, obj: dict[str, Any] | str, bump: int = 0) -> Path:
    path = folder / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    if bump:  # filesystems with coarse mtimes: make the change visible deterministically
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump))
    return path


def unchanged(change: catalog_mod.CatalogChange) -> bool:
    return not (change.added or change.changed or change.removed)


async def all_hashed(cat: Catalog) -> None:
    """Until every present model file has a hash: production never waits for the background
    hasher (a config is served before its hashes exist), so only the tests look at its task."""
    while (task := cat._hash_task) is not None and not task.done():
        await asyncio.wait_for(asyncio.shield(task), timeout=60)


def real_paths(folder: Path, *names: str) -> list[str]:
    return sorted(os.path.realpath(folder / n) for n in names)


async def test_add_change_remove(tmp_path: Path, cat: Catalog) -> None:
    write(tmp_path, "a.kcpps", {"model_param": "a.gguf"})
    change = await cat.refresh()
    assert change.added == ("a",) and not unchanged(change)
    assert cat.resolve("a") is not None

    write(tmp_path, "b.kcpps", {"sdmodel": "pic.safetensors"})
    write(tmp_path, "a.kcpps", {"model_param": "a2.gguf"}, bump=10**9)
    change = await cat.refresh()
    assert (change.added, change.changed, change.removed) == (("b",), ("a",), ())
    assert cat.resolve("a").components["model_param"] == tmp_path / "a2.gguf"  # type: ignore[union-attr]
    assert cat.resolve("b-pic") is not None

    (tmp_path / "a.kcpps").unlink()
    change = await cat.refresh()
    assert change.removed == ("a",) and cat.resolve("a") is None
    assert unchanged(await cat.refresh())


async def test_unchanged_files_are_not_reparsed(
    tmp_path: Path, cat: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "a.kcpps", {"model_param": "a.gguf"})
    await cat.refresh()
    calls: list[tuple[Any, ...]] = []
    real = catalog_mod.parse_kcpps

    def spy(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(catalog_mod, "parse_kcpps", spy)
    await cat.refresh()
    assert calls == []
    write(tmp_path, "a.kcpps", {"model_param": "a.gguf"}, bump=10**9)
    change = await cat.refresh()
    assert len(calls) == 1 and unchanged(change)  # same bytes: touched, not changed


async def test_malformed_files_are_skipped_and_recorded(tmp_path: Path, cat: Catalog) -> None:
    write(tmp_path, "good.kcpps", {"model_param": "g.gguf"})
    write(tmp_path, "broken.kcpps", "{not json")
    write(tmp_path, "evil.kcpps", {"model_param": "g.gguf", "onready": "sh -c x"})
    write(tmp_path, "notes.txt", "ignored")
    write(tmp_path, ".draft.kcpps", "ignored too")
    (tmp_path / "dir.kcpps").mkdir()
    change = await cat.refresh()
    assert change.added == ("good",)
    assert set(cat.errors) == {"broken.kcpps", "evil.kcpps"}
    assert "onready" in cat.errors["evil.kcpps"]
    assert str(tmp_path) not in json.dumps(cat.errors)
    write(tmp_path, "broken.kcpps", {"model_param": "b.gguf"}, bump=10**9)
    change = await cat.refresh()
    assert change.added == ("broken",) and "broken.kcpps" not in cat.errors


async def test_id_collision_skips_later_file(tmp_path: Path, cat: Catalog) -> None:
    # sd.kcpps's image ID "sd-x" equals the text ID of sd-x.kcpps. Files are taken in
    # byte order of their names and "sd-x.kcpps" < "sd.kcpps", so sd.kcpps is skipped.
    write(tmp_path, "sd.kcpps", {"sdmodel": "x.safetensors"})
    write(tmp_path, "sd-x.kcpps", {"model_param": "t.gguf"})
    await cat.refresh()
    assert [c.id for c in cat.all_configs()] == ["sd-x"]
    assert "sd-x.kcpps" in cat.errors["sd.kcpps"]
    assert cat.resolve("sd") is None
    (tmp_path / "sd-x.kcpps").unlink()
    change = await cat.refresh()
    assert change.added == ("sd",) and change.removed == ("sd-x",)
    assert cat.errors == {} and cat.resolve("sd-x") is cat.resolve("sd")


async def test_missing_folder_keeps_catalog(tmp_path: Path) -> None:
    folder = tmp_path / "kcpps"
    folder.mkdir()
    write(folder, "a.kcpps", {"model_param": "a.gguf"})
    catalog = Catalog(folder, BackendMode.LLAMA_SDCPP)
    await catalog.refresh()
    folder.rename(tmp_path / "gone")
    change = await catalog.refresh()
    assert unchanged(change) and "." in change.errors
    assert catalog.resolve("a") is not None
    await catalog.close()


async def test_file_roots_and_default_mode_are_applied(tmp_path: Path) -> None:
    write(tmp_path, "inside.kcpps", {"model_param": "models/a.gguf"})
    write(tmp_path, "outside.kcpps", {"model_param": "/etc/hostname"})
    catalog = Catalog(tmp_path, BackendMode.KOBOLD, (tmp_path / "models",))
    await catalog.refresh()
    assert [c.id for c in catalog.configs()] == ["inside"]
    assert catalog.configs()[0].backend_mode is BackendMode.KOBOLD
    assert "outside" in catalog.errors["outside.kcpps"]
    await catalog.close()


# ---- hashes -----------------------------------------------------------------------------


async def test_asset_hashes_cached(
    tmp_path: Path, cat: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.gguf").write_bytes(b"weights-a")
    (tmp_path / "vae.st").write_bytes(b"vae")
    (tmp_path / "folder-model").mkdir()
    write(tmp_path, "a.kcpps", {"model_param": "a.gguf", "mmproj": "gone.gguf"})
    write(tmp_path, "b.kcpps", {"sdmodel": "a.gguf", "sdvae": "vae.st"})
    write(tmp_path, "c.kcpps", {"model_param": "folder-model", "backend_mode": "vllm"})
    hashed: list[str] = []
    real = catalog_mod._sha256_file

    def counting(key: Any, stop: Any) -> str | None:
        hashed.append(key[0])
        return real(key, stop)

    monkeypatch.setattr(catalog_mod, "_sha256_file", counting)
    await cat.refresh()
    await all_hashed(cat)
    a = cat.resolve("a")
    assert a is not None
    assert a.asset_sha256 == {"model_param": hashlib.sha256(b"weights-a").hexdigest()}
    assert cat.missing_files(a) == ("mmproj",)
    assert cat.resolve("b-a").asset_sha256["sdvae"] == hashlib.sha256(b"vae").hexdigest()  # type: ignore[union-attr]
    assert cat.resolve("c").asset_sha256 == {}  # type: ignore[union-attr]
    assert cat.missing_files(cat.resolve("c")) == ()  # type: ignore[arg-type]
    assert sorted(hashed) == real_paths(tmp_path, "a.gguf", "vae.st")

    hashed.clear()
    write(
        tmp_path,
        "a.kcpps",
        {"model_param": "a.gguf", "mmproj": "gone.gguf", "contextsize": 1},
        bump=10**9,
    )
    await cat.refresh()
    await all_hashed(cat)
    assert hashed == []  # reparsed config, unchanged model file: served from the cache
    assert cat.resolve("a").asset_sha256["model_param"]  # type: ignore[union-attr]

    (tmp_path / "a.gguf").write_bytes(b"weights-a2")
    st = (tmp_path / "a.gguf").stat()
    os.utime(tmp_path / "a.gguf", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    (tmp_path / "gone.gguf").write_bytes(b"proj")
    await cat.refresh()
    await all_hashed(cat)
    assert sorted(hashed) == real_paths(tmp_path, "a.gguf", "gone.gguf")
    a = cat.resolve("a")
    assert a is not None and cat.missing_files(a) == ()
    assert a.asset_sha256["model_param"] == hashlib.sha256(b"weights-a2").hexdigest()


async def test_hashing_runs_in_a_worker_thread(
    tmp_path: Path, cat: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "m.gguf").write_bytes(b"w")
    write(tmp_path, "m.kcpps", {"model_param": "m.gguf"})
    threads: list[threading.Thread] = []
    real = catalog_mod._sha256_file

    def spy(key: Any, stop: Any) -> str | None:
        threads.append(threading.current_thread())
        return real(key, stop)

    monkeypatch.setattr(catalog_mod, "_sha256_file", spy)
    await cat.refresh()
    await all_hashed(cat)
    assert threads and threads[0] is not threading.main_thread()


def test_sha256_file_gives_up_on_change_or_stop(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc" * 1000)
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    assert (
        catalog_mod._sha256_file(key, threading.Event())
        == hashlib.sha256(b"abc" * 1000).hexdigest()
    )
    assert (
        catalog_mod._sha256_file((str(path), st.st_size + 1, st.st_mtime_ns), threading.Event())
        is None
    )
    stop = threading.Event()
    stop.set()
    assert catalog_mod._sha256_file(key, stop) is None
    assert catalog_mod._sha256_file((str(tmp_path / "nope"), 1, 1), threading.Event()) is None


async def test_close_stops_hashing(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"x")
    write(tmp_path, "m.kcpps", {"model_param": "m.gguf"})
    catalog = Catalog(tmp_path, BackendMode.LLAMA_SDCPP)
    await catalog.refresh()
    await catalog.close()
    await catalog.refresh()
    await all_hashed(catalog)
    assert catalog.resolve("m").asset_sha256 == {}  # type: ignore[union-attr]


# ---- availability and disabled state ----------------------------------------------------


async def _availability_catalog(tmp_path: Path) -> Catalog:
    write(tmp_path, "chat.kcpps", {"model_param": "c.gguf"})
    write(tmp_path, "sdxl.kcpps", {"sdmodel": "juggernautXL.safetensors"})
    write(
        tmp_path,
        "combo.kcpps",
        {"model_param": "t.gguf", "sdmodel": "dream.st", "backend_mode": "kobold"},
    )
    write(tmp_path, "split.kcpps", {"model_param": "t.gguf", "sdmodel": "flux.st"})
    write(tmp_path, "embed.kcpps", {"embeddingsmodel": "e.gguf"})
    catalog = Catalog(tmp_path, BackendMode.LLAMA_SDCPP)
    await catalog.refresh()
    return catalog


async def test_listing_rules(tmp_path: Path) -> None:
    catalog = await _availability_catalog(tmp_path)
    assert catalog.text_ids() == ["chat", "combo", "embed", "split"]
    assert catalog.image_ids(set()) == ["sdxl-juggernautXL", "split-flux"]
    assert catalog.image_ids({"combo"}) == ["combo-dream", "sdxl-juggernautXL", "split-flux"]
    assert catalog.resolve("combo-dream") is catalog.resolve("combo")
    await catalog.close()


async def test_disabled_models(tmp_path: Path) -> None:
    catalog = await _availability_catalog(tmp_path)
    events: list[tuple[str, bool]] = []

    async def record(model_id: str, disabled: bool) -> None:
        events.append((model_id, disabled))

    catalog.on_state_change = record
    assert await catalog.set_disabled("combo", True)
    assert not await catalog.set_disabled("combo", True)
    assert catalog.resolve("combo") is None and catalog.resolve("combo-dream") is None
    assert catalog.is_disabled("combo-dream")
    assert "combo" not in catalog.text_ids()
    assert "combo-dream" not in catalog.image_ids({"combo"})
    assert "combo" not in [c.id for c in catalog.configs()]
    assert "combo" in [c.id for c in catalog.all_configs()]

    # Disabling only the image ID of a combined config keeps its text side.
    await catalog.set_disabled("split-flux", True)
    assert catalog.resolve("split-flux") is None and catalog.resolve("split") is not None
    # An image-only config's image ID stands for the whole config.
    await catalog.set_disabled("sdxl-juggernautXL", True)
    assert catalog.resolve("sdxl") is None
    assert "sdxl" not in [c.id for c in catalog.configs()]

    with pytest.raises(KeyError):
        await catalog.set_disabled("nope", True)
    assert await catalog.set_disabled("combo", False)
    assert catalog.resolve("combo") is not None
    assert events == [
        ("combo", True),
        ("split-flux", True),
        ("sdxl-juggernautXL", True),
        ("combo", False),
    ]
    assert catalog.disabled_ids() == {"split-flux", "sdxl-juggernautXL"}
    await catalog.close()


async def test_load_disabled_restores_without_callback(tmp_path: Path) -> None:
    catalog = await _availability_catalog(tmp_path)
    calls: list[Any] = []

    async def record(*args: Any) -> None:
        calls.append(args)

    catalog.on_state_change = record
    catalog.load_disabled(["chat", "later"])
    assert catalog.resolve("chat") is None and catalog.is_disabled("later")
    write(tmp_path, "later.kcpps", {"model_param": "l.gguf"})
    await catalog.refresh()
    assert catalog.resolve("later") is None and calls == []
    await catalog.close()


async def test_watch_picks_up_new_files_and_survives_errors(
    tmp_path: Path, cat: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = asyncio.create_task(cat.watch(0.01))
    write(tmp_path, "late.kcpps", {"model_param": "l.gguf"})
    for _ in range(200):
        if cat.resolve("late"):
            break
        await asyncio.sleep(0.01)
    assert cat.resolve("late") is not None

    async def boom() -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cat, "refresh", boom)
    await asyncio.sleep(0.05)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
