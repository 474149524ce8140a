"""`python -m backends.recipes_cli`: build a backend from its recipe, as make does.

    python -m backends.recipes_cli ensure llama-server whisper-server sd-server
    python -m backends.recipes_cli build vllm --prefix .venv-vllm
    python -m backends.recipes_cli list

`ensure` leaves a backend alone when its installed binary passes the recipe's probe (so
`make backends` on a built machine costs a second or two), else builds into a new prefix
under the root and swaps it in (backends/installs.py). `build` always builds; with
`--prefix` it builds into that folder and swaps nothing (make's vLLM venv).
Missing build tools are installed with apt-get when the machine has it (as root or via sudo),
because CI starts from a bare image.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from backends.base import built_backends_dir
from backends.installs import Layout, discard, old_builds, promote
from backends.recipes import BuildContext, Recipe, default_recipes, load_recipes

PROBE_TIMEOUT = 120.0
_APT_PACKAGES = {"cmake": "cmake", "c++": "g++", "make": "make", "tar": "tar"}


def _say(message: str) -> None:
    print(f"[recipes] {message}", file=sys.stderr, flush=True)


def probe(recipe: Recipe, binary: Path) -> bool:
    """The binary and every companion beside it run (a prefix missing one is no build)."""
    # A file an older build script left at the export path has no prefix: it fails here.
    prefix = Path(str(binary).removesuffix(recipe.binary))
    checks = [(binary, recipe.probe_argv(binary)), *recipe.companion_probes(prefix)]
    return all(_runs(path, argv) for path, argv in checks)


def _runs(binary: Path, argv: list[str]) -> bool:
    if not binary.exists():
        return False
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _install_tools(recipe: Recipe) -> None:
    missing = recipe.missing_tools()
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise SystemExit(f"{recipe.backend_id} needs {', '.join(missing)} (no apt-get here)")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    packages = sorted({_APT_PACKAGES.get(t, t) for t in missing} | {"ca-certificates"})
    _say(f"missing build tools {' '.join(missing)}: installing {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=env)
    install = [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
    subprocess.run(install, check=True, env=env)


def run_steps(recipe: Recipe, ctx: BuildContext) -> None:
    total = len(recipe.steps)
    for index, step in enumerate(recipe.steps, start=1):
        resolved = step.resolve(ctx)
        _say(f"{recipe.backend_id} step {index}/{total}: {step.name}")
        started = time.monotonic()
        env = {**os.environ, **resolved.env}
        done = subprocess.run(resolved.argv, env=env, cwd=resolved.cwd, check=False)
        if done.returncode != 0:
            raise SystemExit(
                f"{recipe.backend_id}: step {step.name} exited {done.returncode}: {resolved.argv}"
            )
        _say(f"{recipe.backend_id} step {index}/{total} done in {time.monotonic() - started:.0f} s")


def build_into(recipe: Recipe, prefix: Path, python: str, jobs: int, root: Path) -> None:
    """Build into `prefix` (make's vLLM venv); no swap."""
    _install_tools(recipe)
    work = prefix.with_name(f".{prefix.name}.work")
    discard(work)
    work.mkdir(parents=True)
    prefix.mkdir(parents=True, exist_ok=True)
    (root / "src").mkdir(parents=True, exist_ok=True)
    try:
        run_steps(recipe, BuildContext(prefix, work, root / "src", python, jobs))
    finally:
        discard(work)
    if not probe(recipe, recipe.binary_in(prefix)):
        raise SystemExit(f"{recipe.backend_id} was built but fails its probe")


def ensure(recipe: Recipe, python: str, jobs: int, root: Path, force: bool) -> None:
    layout = Layout(root, recipe.backend_id)
    with layout.lock(wait=True):  # a second make waits, then finds the build done
        installed = layout.installed_binary(recipe)
        if not force and installed is not None and probe(recipe, installed):
            _say(f"{recipe.backend_id} already installed and runs: skipping ({installed})")
            return
        _install_tools(recipe)
        prefix, work = layout.new_build()
        layout.cache.mkdir(parents=True, exist_ok=True)
        try:
            run_steps(recipe, BuildContext(prefix, work, layout.cache, python, jobs))
            if not probe(recipe, recipe.binary_in(prefix)):
                raise SystemExit(f"{recipe.backend_id} was built but fails its probe")
        except BaseException:
            discard(prefix, work)
            raise
        discard(work)
        record = {
            "backend_id": recipe.backend_id,
            "version": recipe.version,
            "built_at": time.time(),
            "built_by": "make",
        }
        promote(layout, prefix, recipe, record)
        discard(*old_builds(layout))
        _say(f"{recipe.backend_id} {recipe.version} installed: {layout.exported(recipe) or prefix}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m backends.recipes_cli")
    parser.add_argument(
        "--root", type=Path, default=None, help="default TENSOR_ROUTER_BACKENDS_DIR"
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter whose pip runs")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("BUILD_JOBS", "2")))
    parser.add_argument("--recipes-file", type=Path, default=None)
    sub = parser.add_subparsers(dest="command", required=True)
    ensure_cmd = sub.add_parser("ensure", help="build what is missing or broken")
    ensure_cmd.add_argument("backend_ids", nargs="+")
    ensure_cmd.add_argument(
        "--force", action="store_true", default=bool(os.environ.get("FORCE_REBUILD"))
    )
    build_cmd = sub.add_parser("build", help="build now")
    build_cmd.add_argument("backend_id")
    build_cmd.add_argument("--prefix", type=Path, default=None, help="build here, swap nothing")
    sub.add_parser("list", help="the recipes and what they install")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    recipes = load_recipes(args.recipes_file) if args.recipes_file else default_recipes()
    root = (args.root or built_backends_dir()).absolute()
    if args.command == "list":
        for recipe in recipes.values():
            print(f"{recipe.backend_id}\t{recipe.version}\t{len(recipe.steps)} steps")
        return 0
    wanted = args.backend_ids if args.command == "ensure" else [args.backend_id]
    unknown = [name for name in wanted if name not in recipes]
    if unknown:
        _say(f"no recipe for {', '.join(unknown)} (known: {', '.join(recipes)})")
        return 2
    for name in wanted:
        if args.command == "build" and args.prefix is not None:
            build_into(recipes[name], args.prefix.absolute(), args.python, args.jobs, root)
        else:
            force = args.command == "build" or args.force
            ensure(recipes[name], args.python, args.jobs, root, force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
