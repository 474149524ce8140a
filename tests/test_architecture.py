"""The import direction of docs/architecture.md, checked by import-linter's contracts in
pyproject.toml, so `make test` (and CI) fails when a module imports against the layers."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    # cwd goes first on the import path, so a copied tree is the one analysed.
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(cwd / "pyproject.toml")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
    )


def test_the_tree_keeps_every_contract() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def copy_tree(tmp: Path) -> Path:
    for package in ("router", "backends"):
        shutil.copytree(ROOT / package, tmp / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # an upward import across layers
        ("router/config/kcpps.py", "import router.runtime", "Layers"),
        # a handler module imported by something other than the app
        ("router/server.py", "import router.api.admin.meta", "Only the app wires the handlers"),
        # an adapter reaching into the edge, which sits below it in the layers
        ("backends/base.py", "import router.edge", "Backends stand on domain"),
        # lending reaching up into the handlers
        ("router/lending/links.py", "import router.api", "Lending does not import the API"),
        # the node routes reaching up into the client surfaces
        ("router/api/node/node.py", "import router.api.inference", "API subpackages in one"),
        # an API package reaching past another one's face
        ("router/api/admin/meta.py", "import router.api.inference.images", "API admin imports"),
        # a handler reaching into the runtime's internals, or past the pipeline's face
        ("router/api/inference/images.py", "import router.runtime.loader", "Handlers reach"),
        ("router/api/admin/meta.py", "import router.inference.serving", "Handlers reach"),
        # the pipeline reaching up into the handlers
        ("router/inference/kinds.py", "import router.api.node", "Layers"),
        # a runtime part taking the raw session past the backend client
        (
            "router/runtime/sleep.py",
            "import router.backend_client.session",
            "Only the app's wiring holds the raw HTTP session",
        ),
        # a circle between two sibling modules
        ("router/lending/links.py", "import router.lending.owner", "No import circles"),
    ],
)
def test_a_stray_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    tree = copy_tree(tmp_path)
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    done = lint_imports(tree)
    assert done.returncode != 0, done.stdout
    broken = [row for row in done.stdout.splitlines() if " BROKEN" in row]
    assert any(row.startswith(contract) for row in broken), done.stdout
