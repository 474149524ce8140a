"""No function in router/ or backends/ is longer than 50 lines (issue 32's bar): a longer one
is a sign that two concerns share a body. Counted from `def` to the last line, decorators
excluded, docstrings included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 50


def _long_functions(folder: Path, root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LIMIT:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length})")
    return found


def test_no_function_is_over_50_lines() -> None:
    assert _long_functions(ROOT / "router") + _long_functions(ROOT / "backends") == []


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n", encoding="utf-8")
    assert _long_functions(tmp_path, tmp_path) == ["long.py:1 long (51)"]
