"""One runtime: a supervised backend process serving one config on one or more lanes.

Its state moves only along the checked transitions below; the manager is the only caller, and
the rest of the router reads a frozen `RuntimeView` snapshot, never the live object.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from backends.registry import adapter_for
from router.config import ModelConfig, static_lanes
from router.domain import Family, Lane, family_for
from router.errors import BadRequest
from router.runtime.loader import LaunchSpec

if TYPE_CHECKING:
    from backends.process import SupervisedProcess
    from router.runtime.loader import Launched


class RuntimeState(StrEnum):
    LOADING = "loading"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    SLEEPING = "sleeping"  # vLLM `router_sleep`: process alive, weights in host RAM


# A loading runtime is never stopped (it fails or becomes ready), and a stopping one is
# never marked failed: its process exiting is the stop itself, not a crash. A sleeping one
# (router/runtime/sleep.py) is woken through LOADING, or stopped; its process may still die.
_ALLOWED: dict[RuntimeState, frozenset[RuntimeState]] = {
    RuntimeState.LOADING: frozenset({RuntimeState.READY, RuntimeState.FAILED}),
    RuntimeState.READY: frozenset(
        {RuntimeState.STOPPING, RuntimeState.FAILED, RuntimeState.SLEEPING}
    ),
    RuntimeState.SLEEPING: frozenset(
        {RuntimeState.LOADING, RuntimeState.STOPPING, RuntimeState.FAILED}
    ),
    RuntimeState.STOPPING: frozenset({RuntimeState.STOPPED}),
    RuntimeState.STOPPED: frozenset(),
    RuntimeState.FAILED: frozenset(),
}


class IllegalTransition(RuntimeError):
    pass


class Runtime:
    def __init__(self, spec: RuntimeSpec) -> None:
        self.spec = spec
        self.state = RuntimeState.LOADING
        self.leases = 0
        self.lease_starts: list[float] = []  # the manager's clock at each running lease's grant
        self.drain_requests: set[Lane] = set()
        self.unload_requested = False
        # SLEEPING and its sleep call succeeded: the weights are in host RAM, the GPU is free.
        self.asleep = False
        self.waking = False  # LOADING from a sleep: woken, not launched (the ETA prices a wake)
        self.process: SupervisedProcess | None = None
        self.base_url = ""
        self.port = 0
        self.local_model_id = ""
        self.argv: list[str] = []
        self.error: str | None = None
        self.created_at = time.time()
        self.since = self.created_at  # when it entered its current state (wall clock)
        self.ready_at: float | None = None
        self.last_release = time.monotonic()
        # When an interactive request last held a lease on it (the manager's clock): within
        # `runtime.interactive_guard` of it, no batch request's load stops it.
        self.interactive_at: float | None = None
        # When it last became ready (the manager's clock): the requests queued before it are
        # those it was loaded for (policy.ResidentView.ready_at).
        self.ready_clock: float | None = None
        self.gone = asyncio.Event()
        # How long it stays loaded once idle, in seconds (`math.inf`: until unloaded); None
        # follows `runtime.idle_unload`. Set by the requests that say so (Ollama's keep_alive).
        self.keep_alive: float | None = None
        # When it unloads unless a request comes first (wall clock); None while it works,
        # loads or is kept. The idle timer below is what acts on it.
        self.idle_deadline: float | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def config(self) -> ModelConfig:
        return self.spec.config

    @property
    def draining(self) -> bool:
        return bool(self.drain_requests) or self.unload_requested

    def can_move(self, new: RuntimeState) -> bool:
        return new in _ALLOWED[self.state]

    def transition(self, new: RuntimeState) -> None:
        if not self.can_move(new):
            raise IllegalTransition(f"{self.key}: {self.state} -> {new}")
        self.state = new
        self.since = time.time()
        if new is RuntimeState.READY:
            self.ready_at = self.since

    def attach(self, launched: Launched) -> None:
        self.process = launched.process
        self.base_url = launched.base_url
        self.port = launched.port
        self.local_model_id = launched.local_model_id
        self.argv = launched.argv

    def arm_idle_timer(self, delay: float, callback: Callable[[], None]) -> None:
        self.cancel_idle_timer()
        self._idle_timer = asyncio.get_running_loop().call_later(delay, callback)
        self.idle_deadline = time.time() + delay

    def cancel_idle_timer(self) -> None:
        self.idle_deadline = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def effective_keep_alive(self, idle_unload: float) -> float:
        """Seconds it stays loaded once idle (`math.inf`: until unloaded); `idle_unload` is
        the router's setting, where 0 means never."""
        if self.keep_alive is not None:
            return self.keep_alive
        return idle_unload if idle_unload > 0 else math.inf

    def identity(self) -> dict[str, Any]:
        return {
            "runtime": self.key,
            "model": self.config.id,
            "family": self.spec.family.value,
            "lanes": sorted(lane.value for lane in self.spec.occupies),
        }

    def describe(self, queued: dict[str, int]) -> dict[str, Any]:
        identity = self.identity()
        return {
            **identity,
            "state": self.state.value,
            "pid": self.process.pid if self.process else None,
            "port": self.port or None,
            "in_flight": self.leases,
            "draining": self.draining,
            "queued": {lane: queued.get(lane, 0) for lane in identity["lanes"]},
            "error": self.error,
            "ready_at": self.ready_at,
            "since": self.since,
        }

    def view(self, queued: int, idle_unload: float = 0.0, last_used: float = 0.0) -> RuntimeView:
        return RuntimeView(
            key=self.key,
            config=self.config,
            lane=primary_of(self.spec.occupies) or self.spec.lane,
            occupies=self.spec.occupies,
            family=self.spec.family,
            state=self.state,
            draining=self.draining,
            leases=self.leases,
            since=self.since,
            pid=self.process.pid if self.process else None,
            port=self.port or None,
            base_url=self.base_url,
            queued=queued,
            keep_alive=self.effective_keep_alive(idle_unload),
            idle_deadline=self.idle_deadline,
            last_used=last_used,
        )


@dataclass(frozen=True)
class RuntimeView:
    """What one runtime was doing at one instant; handlers decide on this, never on `Runtime`.

    `lane` is its primary lane (its leases are counted there, whichever lane asked for them);
    `occupies` every lane it holds (several for KoboldCpp). `queued`: requests waiting for it.
    `keep_alive`: seconds it stays loaded once idle (`math.inf`: until unloaded);
    `idle_deadline`: the wall-clock time it unloads unless a request comes first (None while
    it loads or works, or when it is kept).
    """

    key: str
    config: ModelConfig
    lane: Lane
    occupies: frozenset[Lane]
    family: Family
    state: RuntimeState
    draining: bool
    leases: int
    since: float
    pid: int | None
    port: int | None
    base_url: str
    queued: int
    keep_alive: float = math.inf
    idle_deadline: float | None = None
    last_used: float = 0.0  # the manager's clock at its last lease grant (0: never)

    @property
    def ready(self) -> bool:
        return self.state is RuntimeState.READY

    @property
    def active(self) -> bool:
        """Loading or serving, and not on its way out: the lane's model for unnamed requests
        (docs/decisions.md, "The lane's active runtime")."""
        return self.state in ACTIVE_STATES and not self.draining


ACTIVE_STATES = frozenset({RuntimeState.LOADING, RuntimeState.READY})


@dataclass(frozen=True)
class RuntimeSpec(LaunchSpec):
    occupies: frozenset[Lane] = frozenset()
    requires: frozenset[Lane] = frozenset()


def spec_for(config: ModelConfig, lane: Lane) -> RuntimeSpec:
    """Which process serves `lane` for `config`, and which lanes it needs empty first."""
    if lane not in config.lanes:
        raise BadRequest(f"model {config.id!r} has no {lane} component")
    family = family_for(config.backend_mode, lane)
    if family is None:
        raise BadRequest(f"{lane} is not served under backend_mode {config.backend_mode}")
    # KoboldCpp serves every lane of its config from one process, except a separate
    # embeddings process when the config asks for one (`run_embed_separate`).
    occupies = adapter_for(family).runtime_lanes(config, lane)
    suffix = (
        "kobold-embed"
        if family is Family.KOBOLD and occupies == {Lane.EMBEDDINGS} and (config.run_embed_separate)
        else ("kobold" if family is Family.KOBOLD else lane.value)
    )
    key = f"{runtime_identity(config)}@{suffix}"
    # Lanes named by router_unload_policy; its family:/config: entries depend on what runs
    # when the load starts and are resolved by the manager then.
    extra = static_lanes(config.unload_triggers)
    return RuntimeSpec(key, config, lane, family, occupies, occupies | extra)


def runtime_identity(config: ModelConfig) -> str:
    """Configs that differ only in the *values* of the same top-level `jinja_kwargs` keys share
    one loaded runtime; the values reach the backend per request as `chat_template_kwargs`."""
    if not config.jinja_kwargs:
        return config.id
    rest = {k: v for k, v in config.raw.items() if k not in _JINJA_KEYS}
    shape = {
        "raw": rest,
        "mode": config.backend_mode.value,
        "components": {k: str(v) for k, v in config.components.items()},
        "jinja_keys": sorted(config.jinja_kwargs),
    }
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()
    return f"jinja-{digest[:16]}"


_JINJA_KEYS = frozenset({"jinja_kwargs", "router_jinja_kwargs_precedence"})


_LANE_ORDER = (Lane.TEXT, Lane.IMAGE, Lane.EMBEDDINGS, Lane.VOICE, Lane.MUSIC)


def primary_of(lanes: frozenset[Lane]) -> Lane | None:
    """The first of `lanes` in the order text, image, embeddings, voice, music."""
    return next((lane for lane in _LANE_ORDER if lane in lanes), None)


def primary_lane(config: ModelConfig) -> Lane:
    lane = primary_of(config.lanes)
    if lane is None:
        raise BadRequest(f"model {config.id!r} has no servable component")
    return lane


# ---- what the runtime manager hands out and keeps in its queues ---------------------


class LoadObserver(Protocol):
    """Sees one load attempt (load captures, router/runtime/captures.py)."""

    attempt_id: str | None
    trace_id: str | None  # the load's trace, set before it launches (load_trace.py)

    def launched(self, argv: list[str]) -> None: ...
    def output(self, stream: str, line: bytes) -> None: ...
    async def ready(self) -> None: ...  # answered ready: read what needs awaiting, once
    def finished(self, status: str, exit_code: int | None, error: str | None) -> None: ...


ObserverFactory = Callable[[Runtime], LoadObserver | None]


@dataclass(eq=False)
class Lease:
    runtime: Runtime
    queue_wait_ms: float
    _release: Callable[[Runtime], None] = field(repr=False)
    released: bool = False

    @property
    def base_url(self) -> str:
        return self.runtime.base_url

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._release(self.runtime)
