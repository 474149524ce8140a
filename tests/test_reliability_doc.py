"""docs/reliability.md cannot drift from the tree: every reliability or security ID that code,
tests or docs cite has a row; every test a row names exists; every test named for an ID
(`test_r9_...`, `test_r2_r3_...`) is listed in that ID's row; every row names a test; and the
prose agrees with the table (an ID listed under "Not promised yet" has no row)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = Path("docs") / "reliability.md"
SOURCES = ("router", "backends", "tests", "bench")

CITED = re.compile(r"\b([RS][0-9]{1,2}b?)\b")
ROW = re.compile(r"^\| ([RS][0-9]{1,2}b?) \|(.*)\|(.*)\|\s*$")
REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
NAMED = re.compile(r"^test_((?:[rs][0-9]{1,2}b?_)+)")


def _id(token: str) -> str:
    return token[:-1].upper() + "b" if token.endswith("b") else token.upper()


def cited(root: Path) -> dict[str, set[str]]:
    """ID -> files citing it, over the sources and the docs (the index itself excepted)."""
    found: dict[str, set[str]] = {}
    files = [p for top in SOURCES for p in (root / top).rglob("*.py")]
    files += [p for p in (root / "docs").glob("*.md") if p != root / DOC]
    files += [root / "README.md"]
    for path in files:
        if path.is_file():
            for match in CITED.finditer(path.read_text(errors="replace")):
                found.setdefault(match.group(1), set()).add(str(path.relative_to(root)))
    return found


def functions_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def named_tests(root: Path) -> dict[str, set[str]]:
    """ID -> `path::test` for every test whose name starts with one or more IDs."""
    named: dict[str, set[str]] = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        for name in functions_in(path):
            if match := NAMED.match(name):
                for token in match.group(1).strip("_").split("_"):
                    ref = f"{path.relative_to(root)}::{name}"
                    named.setdefault(_id(token), set()).add(ref)
    return named


def rows(doc: str) -> dict[str, set[str]]:
    """ID -> the `path::test` references in its row."""
    out: dict[str, set[str]] = {}
    for line in doc.splitlines():
        if match := ROW.match(line):
            out[match.group(1)] = {f"{p}::{n}" for p, n in REF.findall(match.group(3))}
    return out


NOT_PROMISED = "## Not promised yet"


def not_promised(doc: str) -> set[str]:
    """The IDs the "Not promised yet" section lists (up to the next heading)."""
    if NOT_PROMISED not in doc:
        return set()
    section = doc.split(NOT_PROMISED, 1)[1].split("\n## ", 1)[0]
    return set(CITED.findall(section))


def problems(root: Path) -> list[str]:
    text = (root / DOC).read_text()
    index = rows(text)
    found: list[str] = [
        f"{ident} has a row in {DOC} but is listed under 'Not promised yet'"
        for ident in sorted(not_promised(text) & index.keys())
    ]
    for ident, where in sorted(cited(root).items()):
        if ident not in index:
            found.append(f"{ident} is cited in {', '.join(sorted(where))} but has no row in {DOC}")
    for ident, refs in sorted(index.items()):
        if not refs:
            found.append(f"{ident}: the row names no test")
        found += [
            f"{ident}: {ref} does not exist" for ref in sorted(refs) if not _exists(root, ref)
        ]
    for ident, refs in sorted(named_tests(root).items()):
        missing = refs - index.get(ident, set())
        found += [f"{ident}: add `{ref}` to its row in {DOC}" for ref in sorted(missing)]
    return found


def _exists(root: Path, ref: str) -> bool:
    path, _, name = ref.partition("::")
    return (root / path).is_file() and name in functions_in(root / path)


def test_the_index_matches_the_tree() -> None:
    assert problems(ROOT) == []


# ---- the check itself fails when the index drifts -------------------------------------------


def tree(
    tmp: Path, doc_rows: Iterable[str], tests: str, comment: str = "", prose: str = ""
) -> Path:
    (tmp / "docs").mkdir()
    (tmp / "tests").mkdir()
    (tmp / "router").mkdir()
    (tmp / "README.md").write_text("")
    table = "| ID | Promise | Shown by |\n|---|---|---|\n" + "\n".join(doc_rows)
    (tmp / DOC).write_text(table + "\n\n" + prose)
    (tmp / "tests" / "test_x.py").write_text(tests)
    (tmp / "router" / "m.py").write_text(comment)
    return tmp


GOOD_TEST = "def test_r9_hang_is_cut():\n    pass\n"
GOOD_ROW = "| R9 | a hung stream ends | `tests/test_x.py::test_r9_hang_is_cut` |"


def test_a_consistent_tree_has_no_problems(tmp_path: Path) -> None:
    assert problems(tree(tmp_path, [GOOD_ROW], GOOD_TEST, "# R9: cut the stream")) == []


def test_a_cited_id_without_a_row_is_a_problem(tmp_path: Path) -> None:
    root = tree(tmp_path, [GOOD_ROW], GOOD_TEST, "# see S14 and R9")
    assert problems(root) == [f"S14 is cited in router/m.py but has no row in {DOC}"]


def test_a_row_naming_a_missing_test_is_a_problem(tmp_path: Path) -> None:
    row = GOOD_ROW.replace("` |", "`, `tests/test_x.py::test_gone` |")
    assert problems(tree(tmp_path, [row], GOOD_TEST)) == [
        "R9: tests/test_x.py::test_gone does not exist"
    ]


def test_a_test_named_for_an_id_must_be_in_its_row(tmp_path: Path) -> None:
    tests = GOOD_TEST + "async def test_r2_r9_wrapper_tree():\n    pass\n"
    assert problems(tree(tmp_path, [GOOD_ROW], tests)) == [
        f"R2: add `tests/test_x.py::test_r2_r9_wrapper_tree` to its row in {DOC}",
        f"R9: add `tests/test_x.py::test_r2_r9_wrapper_tree` to its row in {DOC}",
    ]


def test_a_row_without_a_test_is_a_problem(tmp_path: Path) -> None:
    assert problems(tree(tmp_path, [GOOD_ROW, "| S3 | a cap | none yet |"], GOOD_TEST)) == [
        "S3: the row names no test"
    ]


def test_an_id_with_a_row_must_not_be_listed_as_not_promised(tmp_path: Path) -> None:
    prose = f"{NOT_PROMISED}\n\nNot built: R9 (hangs) and R2 (forks).\n\n## Later\n\nR9 again.\n"
    assert problems(tree(tmp_path, [GOOD_ROW], GOOD_TEST, prose=prose)) == [
        f"R9 has a row in {DOC} but is listed under 'Not promised yet'"
    ]


def test_the_not_promised_section_ends_at_the_next_heading() -> None:
    doc = f"{NOT_PROMISED}\n\nR2 and S3.\n\n## Other\n\nR9 is fine here.\n"
    assert not_promised(doc) == {"R2", "S3"}
