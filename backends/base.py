"""The `Backend` adapter contract shared by every native backend family.

An adapter turns a `ModelConfig` plus router settings into a launch (argv, environment,
files to write) and knows how to tell that the launched process is ready and is the one we
started. It never spawns anything itself: `backends/process.py` and `router/runtime/manager.py` do.
The argv is always a list handed to exec (never a shell) and always binds 127.0.0.1 on the
router-allocated port; operator `extra_args` are checked so they cannot undo that.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import aiohttp

from backends.routes import RouteTable
from router.config import PROGRAM_SECTIONS, ModelConfig, ProgramSection, Settings
from router.domain import BackendMode, Family, Lane, family_for

LOOPBACK = "127.0.0.1"
PROBE_TIMEOUT = 2.0
VERIFY_TIMEOUT = 10.0

# Refused in every family's extra_args (S20), whatever the program: any family's spelling
# of the listen address or port (so no argv ever names another host), KoboldCpp's shell
# hook, and remote code, which only vLLM may run and only when settings allow it.
ALWAYS_REFUSED = frozenset(
    {
        "--host", "--port", "--listen-ip", "--listen-port", "--onready",
        "--allow-config-onready", "--trust-remote-code",
    }
)  # fmt: skip

# Never inherited by a child: the router's own credentials.
_ROUTER_ENV_PREFIX = "TENSOR_ROUTER_"


class BackendError(Exception):
    """Base of every adapter error; messages name flags and files, never key material."""


class BackendUnavailable(BackendError):
    """The family's program cannot be found; the message says how to install or configure it."""


class UnsafeArguments(BackendError):
    """Arguments that would override a router-managed flag or are not allowed at all."""

    def __init__(self, source: str, flag: str, reason: str) -> None:
        self.source, self.flag, self.reason = source, flag, reason
        super().__init__(f"{source}: {flag} {reason}")


class IdentityMismatch(BackendError):
    """The process answering on our port is not the one the router started."""


class ConfigNotSupported(BackendError):
    """The configuration asks for something this family cannot be launched with."""


class Backend(ABC):
    """One native program family. Instances are stateless and shared (see registry.py)."""

    family: ClassVar[Family]
    default_program: ClassVar[str]
    install_hint: ClassVar[str]
    ready_path: ClassVar[str]
    ready_line: ClassVar[re.Pattern[str] | None] = None
    # Flags (every alias) that extra_args may not set: the router decides them.
    managed_flags: ClassVar[frozenset[str]] = frozenset()
    # Python argparse programs accept `--prefix` abbreviations and `-mVALUE` short forms.
    argparse_style: ClassVar[bool] = False
    # Single-dash options that start like a managed short flag but are something else.
    known_short: ClassVar[frozenset[str]] = frozenset()
    # Environment variables that would set a managed option or a backend API key.
    managed_env: ClassVar[frozenset[str]] = frozenset()
    routes: ClassVar[RouteTable]

    # -- program and launch ------------------------------------------------------------

    def section(self, settings: Settings) -> ProgramSection:
        section: ProgramSection = getattr(settings, PROGRAM_SECTIONS[self.family])
        return section

    def program(self, settings: Settings) -> list[str]:
        """The command prefix: `command`, else `binary_path`, else the default on PATH."""
        section = self.section(settings)
        if section.command:
            return list(section.command)
        if section.binary_path is not None:
            return [str(_checked_binary(section.binary_path, PROGRAM_SECTIONS[self.family]))]
        found = self.find_default()
        if found is None:
            raise BackendUnavailable(
                f"{self.default_program} was not found on PATH; {self.install_hint}"
            )
        return found

    def find_default(self) -> list[str] | None:
        """PATH first, then the per-machine build folder (`<root>/bin`, backends/installs.py)."""
        found = shutil.which(self.default_program) or shutil.which(
            self.default_program, path=str(built_backends_dir() / "bin")
        )
        return [found] if found else None

    def argv(
        self,
        config: ModelConfig,
        lane: Lane,
        port: int,
        settings: Settings,
        *,
        workdir: Path | None = None,
    ) -> list[str]:
        """Full argv: program, router-managed flags, mapped .kcpps fields, then extra_args."""
        self.check_lane(config, lane)
        extra = list(self.section(settings).extra_args)
        self.check_extra_args(extra, settings)
        args = self.launch_args(config, lane, port, settings, workdir)
        return [*self.program(settings), *args, *extra]

    @abstractmethod
    def launch_args(
        self,
        config: ModelConfig,
        lane: Lane,
        port: int,
        settings: Settings,
        workdir: Path | None,
    ) -> list[str]:
        """Family-specific arguments after the program (managed and mapped flags)."""

    def launch_files(self, config: ModelConfig, lane: Lane, settings: Settings) -> dict[str, bytes]:
        """Files (name -> bytes) the runtime writes into `workdir` before spawning."""
        return {}

    def check_extra_args(self, extra: Sequence[str], settings: Settings) -> None:
        check_args(
            extra,
            self.managed_flags | ALWAYS_REFUSED,
            source=f"{PROGRAM_SECTIONS[self.family]}.extra_args",
            argparse_style=self.argparse_style,
            known_short=self.known_short,
        )

    def default_env(self, config: ModelConfig, lane: Lane) -> dict[str, str]:
        return {}

    def env(self, config: ModelConfig, lane: Lane, settings: Settings) -> dict[str, str]:
        """Extra environment for the child: family defaults overlaid by settings `env`."""
        configured = dict(self.section(settings).env)
        for name in configured:
            if name in self.managed_env or name.startswith(_ROUTER_ENV_PREFIX):
                raise UnsafeArguments(
                    f"{PROGRAM_SECTIONS[self.family]}.env", name, "is managed by the router"
                )
        return {**self.default_env(config, lane), **configured}

    # -- lanes and identity --------------------------------------------------------------

    def lanes_served(self, mode: BackendMode) -> frozenset[Lane]:
        """Lanes this family serves under `mode` (DESIGN.md section 4)."""
        return frozenset(lane for lane in Lane if family_for(mode, lane) is self.family)

    def runtime_lanes(self, config: ModelConfig, lane: Lane) -> frozenset[Lane]:
        """Lanes one runtime started for `lane` serves (KoboldCpp: several)."""
        return frozenset({lane})

    def check_lane(self, config: ModelConfig, lane: Lane) -> None:
        if lane not in self.lanes_served(config.backend_mode):
            raise ConfigNotSupported(
                f"{self.family} does not serve the {lane} lane in {config.backend_mode} mode"
            )

    def local_model_id(self, config: ModelConfig, lane: Lane) -> str:
        """The model name the backend itself puts in its JSON (for ID rewriting)."""
        return config.id

    def serves(self, path: str, method: str) -> bool:
        """Whether this family implements `method path` as the router launches it."""
        return self.routes.matches(path, method)

    # -- readiness -----------------------------------------------------------------------

    async def is_ready(self, session: aiohttp.ClientSession, base_url: str) -> bool:
        """True only on the real ready answer; refused, 503 and timeouts are 'not yet'."""
        try:
            timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
            async with session.get(base_url + self.ready_path, timeout=timeout) as resp:
                await resp.read()
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError):
            return False

    async def verify(
        self, session: aiohttp.ClientSession, base_url: str, config: ModelConfig, lane: Lane
    ) -> None:
        """Raise IdentityMismatch unless the answering process is the one we launched."""
        return None


# -- argument checking -------------------------------------------------------------------


def _is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NUMBER.fullmatch(token)


_NUMBER = re.compile(r"-\d+(\.\d+)?")


def option_name(token: str) -> str:
    """`--flag=value` -> `--flag`; underscores count as dashes (vLLM and argparse accept both)."""
    return token.split("=", 1)[0].replace("_", "-")


def check_args(
    args: Sequence[str],
    managed: frozenset[str],
    *,
    source: str,
    argparse_style: bool = False,
    known_short: frozenset[str] = frozenset(),
) -> None:
    """Refuse any token that sets a managed flag, in every spelling the program accepts,
    and bare tokens that would be read as positionals (KoboldCpp's positional model and
    port, `vllm serve`'s model). The C++ parsers take at most one value per flag, so for
    them a bare token after a bare token is a positional too."""
    normalized = {m.replace("_", "-") for m in managed}
    previous: str | None = None
    for token in args:
        if not isinstance(token, str):
            raise UnsafeArguments(source, repr(token), "is not a string")
        if "\x00" in token:
            raise UnsafeArguments(source, repr(token), "contains a NUL byte")
        if not _is_option(token):
            stray = previous is None or (not argparse_style and not _is_option(previous))
            if stray:
                raise UnsafeArguments(source, repr(token), "is not the value of a flag")
            previous = token
            continue
        previous = token
        name = option_name(token)
        if name in normalized:
            raise UnsafeArguments(source, name, "is managed by the router and may not be set")
        if argparse_style:
            _check_argparse_forms(token, name, normalized, source, known_short)


def _check_argparse_forms(
    token: str, name: str, managed: set[str], source: str, known_short: frozenset[str]
) -> None:
    if name.startswith("--"):
        # argparse resolves unambiguous prefixes: `--ho` means `--host`.
        for flag in managed:
            if flag.startswith("--") and len(name) > 2 and flag.startswith(name):
                raise UnsafeArguments(source, name, f"abbreviates {flag}, which the router manages")
        return
    if name in known_short:
        return
    for flag in managed:
        # `-mVALUE` is `-m VALUE` to argparse.
        if not flag.startswith("--") and len(flag) == 2 and name.startswith(flag):
            raise UnsafeArguments(source, name, f"sets {flag}, which the router manages")


def _checked_binary(path: Path, section: str) -> Path:
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BackendUnavailable(f"{section}.binary_path is not an executable file: {path.name}")
    return path


# -- shared helpers for adapters -----------------------------------------------------------


def built_backends_dir() -> Path:
    """Where `python -m backends.recipes_cli` and init jobs put built backends (one per machine)."""
    configured = os.environ.get("TENSOR_ROUTER_BACKENDS_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "tensor-router" / "backends"


def child_environ(
    backend: Backend,
    config: ModelConfig,
    lane: Lane,
    settings: Settings,
    base: Mapping[str, str],
) -> dict[str, str]:
    """The child's whole environment: `base` minus router credentials and managed
    variables (an inherited VLLM_API_KEY would lock the router out), plus `env()`."""
    kept = {
        k: v
        for k, v in base.items()
        if not k.startswith(_ROUTER_ENV_PREFIX) and k not in backend.managed_env
    }
    kept.update(backend.env(config, lane, settings))
    return kept


def config_path(config: ModelConfig, key: str) -> Path | None:
    """A file or folder named by `key`: the parser's resolved component, else the raw
    string resolved against the .kcpps folder (relative paths in a .kcpps mean that)."""
    if key in config.components:
        return config.components[key]
    value = config.raw.get(key)
    if isinstance(value, str) and value.strip():
        path = Path(value)
        return path if path.is_absolute() else config.path.parent / path
    return None


def positive_int(config: ModelConfig, key: str) -> int | None:
    """`raw[key]` as an int when it is a positive number (KoboldCpp uses -1/0 for 'auto')."""
    value = config.raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number > 0 else None


def flag_set(config: ModelConfig, key: str) -> bool:
    return config.raw.get(key) in (True, 1, "true", "True")


async def get_json(
    session: aiohttp.ClientSession, url: str, wait: float = VERIFY_TIMEOUT
) -> tuple[int, Any]:
    """(status, parsed JSON or None); transport errors become IdentityMismatch because an
    answer we cannot read cannot prove the process is ours."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=wait)) as resp:
            body = await resp.read()
            status = resp.status
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise IdentityMismatch(f"no answer from the backend while verifying it: {exc}") from exc
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def model_ids(payload: Any) -> set[str]:
    """Every `id` (and llama-server `aliases`) in an OpenAI-style model list."""
    ids: set[str] = set()
    data = payload.get("data") if isinstance(payload, dict) else None
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict):
            if isinstance(entry.get("id"), str):
                ids.add(entry["id"])
            aliases = entry.get("aliases")
            if isinstance(aliases, list):
                ids.update(a for a in aliases if isinstance(a, str))
    return ids
