"""The lending node's side of a vLLM gang (docs/cluster.md, "vLLM multi-node"): under a
`vllm` lease the node starts its own configured vLLM as a headless follower through the
supervisor, with its own `.kcpps` of the same model ID (every node of a gang needs the model
files; no path from the master reaches this node's argv). A follower serves no HTTP; it
runs once its process has started and not exited within `SETTLE` seconds."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from backends.base import BackendError, child_environ
from backends.process import SupervisedProcess
from backends.vllm import VllmBackend
from router.cluster.pooled.gang import GangFlags
from router.config import ModelConfig, Settings
from router.domain import BackendMode, Lane
from router.errors import LeaseRefused, ServiceUnavailable

SETTLE = 1.0  # a follower that cannot start (bad flags, missing files) exits at once
STOP_GRACE = 5.0


class VllmFollowers:
    def __init__(
        self, settings: Settings, resolve: Callable[[str], ModelConfig | None], pid_dir: Path
    ) -> None:
        self._settings = settings
        self._resolve = resolve  # the node's catalog: a model ID to its config
        self._pid_dir = pid_dir
        self._adapter = VllmBackend()

    def argv(self, model: str, flags: GangFlags) -> tuple[list[str], dict[str, str]]:
        """The follower's argv and environment, from this node's own config of `model`."""
        config = self._resolve(model)
        if config is None or config.backend_mode is not BackendMode.VLLM:
            raise LeaseRefused(f"this node has no vLLM model {model!r} to follow with")
        if Lane.TEXT not in config.lanes:
            raise LeaseRefused(f"{model} has no text model on this node")
        try:
            argv = self._adapter.follower_argv(config, self._settings, flags.argv())
        except BackendError as err:
            raise LeaseRefused(f"cannot start a vLLM follower for {model}: {err}") from None
        env = child_environ(self._adapter, config, Lane.TEXT, self._settings, os.environ)
        return argv, env

    async def start(self, lease_id: str, model: str, flags: GangFlags) -> SupervisedProcess:
        argv, env = self.argv(model, flags)
        process = SupervisedProcess(
            argv, env=env, name=f"vllm-{lease_id}", pidfile_dir=self._pid_dir
        )
        try:
            await process.start()
        except OSError as err:
            raise ServiceUnavailable(f"cannot start vLLM: {err.strerror or err}") from None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.exited.wait(), SETTLE)
        if process.exited.is_set():
            tail = " | ".join(process.tail(5))
            await process.stop(STOP_GRACE)
            raise ServiceUnavailable(f"the vLLM follower exited at once: {tail}")
        return process


__all__ = ["SETTLE", "VllmFollowers"]
