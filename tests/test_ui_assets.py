"""router/api/admin/ui_static.py's pure path decision and the package data it serves from."""

from __future__ import annotations

import re

import pytest

from router.api.admin.ui_static import CONTENT_TYPES, asset_path, ui_root
from router.errors import NotFound


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("", None),
        ("models", None),
        ("models/extra", None),
        ("app.js", "app.js"),
        ("lib/dom.js", "lib/dom.js"),
        ("pages/overview.js", "pages/overview.js"),
        ("APP.CSS", "APP.CSS"),
    ],
)
def test_asset_path_maps_tails(tail: str, expected: str | None) -> None:
    assert asset_path(tail) == expected


@pytest.mark.parametrize(
    "tail",
    [
        "../x.js",
        "lib/../../x.js",
        ".hidden.js",
        "lib/.x",
        "a\\b.js",
        "x.py",
        "x.sqlite",
        "nul\x00.js",
    ],
)
def test_asset_path_refuses_anything_else(tail: str) -> None:
    with pytest.raises(NotFound) as caught:
        asset_path(tail)
    assert caught.value.headers["X-Content-Type-Options"] == "nosniff"


def test_every_shipped_file_has_a_content_type_and_no_inline_code() -> None:
    root = ui_root()
    files = [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert {p.name for p in files} >= {"index.html", "app.js", "app.css", "README.md"}
    for path in files:
        assert path.suffix.lower() in CONTENT_TYPES, path
        text = path.read_text()
        if path.suffix == ".js":
            text = re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE)  # comments may name them
            # Data never becomes markup: no innerHTML/outerHTML/insertAdjacentHTML, no eval.
            assert not re.search(
                r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function",
                text,
            ), path
            assert "style=" not in text and ".style." not in text, path  # CSP: no inline style
        if path.suffix == ".html":
            assert not re.search(r"<script(?![^>]*\bsrc=)|<style|style=|\son[a-z]+=", text), path


def test_pyproject_ships_every_ui_folder_as_package_data() -> None:
    import tomllib
    from pathlib import Path

    data = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["router"]
    root = ui_root()
    for path in root.rglob("*"):
        if path.is_file():
            relative = path.relative_to(root.parent).as_posix()
            folder, suffix = relative.rsplit("/", 1)[0], path.suffix
            assert f"{folder}/*{suffix}" in patterns, f"{relative} would be missing from the wheel"
