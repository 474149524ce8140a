"""vLLM launch options: the persisted Hugging Face offline switches.

Each switch is one environment variable of every vLLM launch ("1" on, "0" off; both are
what huggingface_hub, transformers and datasets read). Until an admin sets them, they are
what the launch would get anyway: on (the adapter's offline default) unless `vllm.env` sets
the variable. Once set they are kept in `<data>/launch-options.json` (written atomically)
and win over `vllm.env`. A running vLLM keeps the environment it started with; the route
that changes them unloads the running vLLM runtimes, so the next load applies them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from router.config import Settings
from router.config.files import write_atomic
from router.domain import Family
from router.errors import BadRequest

log = logging.getLogger(__name__)

BACKEND_ID = "vllm"
OPTION_ENV: Mapping[str, str] = {
    "hf_hub_offline": "HF_HUB_OFFLINE",
    "transformers_offline": "TRANSFORMERS_OFFLINE",
    "hf_datasets_offline": "HF_DATASETS_OFFLINE",
}
_TRUE = frozenset({"1", "on", "yes", "true"})


def check_backend(backend_id: Any) -> str:
    if backend_id in (None, ""):
        raise BadRequest(
            "backend_id is required (launch options exist for vllm only)", param="backend_id"
        )
    if backend_id != BACKEND_ID:
        shown = backend_id[:64] if isinstance(backend_id, str) else type(backend_id).__name__
        raise BadRequest(
            f"launch options exist for backend_id vllm only, not {shown!r}", param="backend_id"
        )
    return BACKEND_ID


def parse_options(raw: Any) -> dict[str, bool]:
    """`options` of a POST: an object of known switches, each true or false (any subset)."""
    if not isinstance(raw, dict) or not raw:
        names = ", ".join(OPTION_ENV)
        raise BadRequest(f"options must be a non-empty object of {names}", param="options")
    unknown = sorted(set(raw) - set(OPTION_ENV))
    if unknown:
        raise BadRequest(
            f"unknown launch option {unknown[0][:64]!r} (known: {', '.join(OPTION_ENV)})",
            param="options",
        )
    for name, value in raw.items():
        if not isinstance(value, bool):
            raise BadRequest(f"options.{name} must be true or false", param=f"options.{name}")
    return dict(raw)


class LaunchOptions:
    def __init__(self, path: Path, settings: Settings) -> None:
        self.path = path
        configured = settings.vllm.env
        self.defaults = {
            name: configured.get(env, "1").strip().lower() in _TRUE
            for name, env in OPTION_ENV.items()
        }
        self._saved = self._read()

    def _read(self) -> dict[str, bool]:
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring %s: %s", self.path, exc)
            return {}
        saved = data.get(BACKEND_ID) if isinstance(data, dict) else None
        if not isinstance(saved, dict):
            return {}
        return {k: v for k, v in saved.items() if k in OPTION_ENV and isinstance(v, bool)}

    @property
    def persisted(self) -> bool:
        return bool(self._saved)

    def current(self) -> dict[str, bool]:
        return {**self.defaults, **self._saved}

    def update(self, changes: Mapping[str, bool]) -> bool:
        """Persist `changes` (blocking, small); True when an effective value changed."""
        before = self.current()
        saved = {**self._saved, **changes}
        write_atomic(
            self.path, json.dumps({BACKEND_ID: saved}, indent=1).encode(), make_parent=True
        )
        self._saved = saved
        return self.current() != before

    def env_for(self, family: Family) -> dict[str, str]:
        """The environment a launch of `family` gets from these options (the loader's hook)."""
        if family is not Family.VLLM:
            return {}
        return {OPTION_ENV[name]: "1" if on else "0" for name, on in self.current().items()}
