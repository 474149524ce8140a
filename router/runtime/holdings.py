"""What each live runtime holds in memory (issue 25; docs/residency.md), for the live ledger
(router/runtime/ledger.py).

`Holdings` turns the manager's live runtimes into the pure core's `Ledger`: each runtime holds the
measured figure when `Figures.lookup(config id, launch_fingerprint(...))` has one (source
"measured"; router/runtime/measuring.py records them), else its estimate, which is
computed once per configuration version off the event loop (`prepare`) and cached. A stopping
runtime (and a failed one whose process is being stopped) keeps its bytes until the manager
drops it, which happens only once its process has exited.

`Uses` counts the leases each runtime was granted lately: the eviction rule's "recent use".
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from router.config import Settings
from router.config.schema import PROGRAM_SECTIONS, ProgramSection
from router.memory import eviction
from router.memory.devices import Device, budgets
from router.memory.estimate import Estimate, gang_share, local_share
from router.memory.eviction import Plan
from router.memory.figures import Figures, NoFigures
from router.memory.fingerprint import launch_fingerprint
from router.memory.ledger import Ledger, Resident, State, Usage
from router.memory.sizing import estimate_config
from router.memory.status import machine_devices
from router.runtime.sleep import weights_size
from router.runtime.state import Runtime, RuntimeSpec, RuntimeState

# A use older than this no longer counts as recent (the eviction rule's reload cost).
RECENT_WINDOW = 1800.0

_STATES: Mapping[RuntimeState, State] = {
    RuntimeState.LOADING: "loading",
    RuntimeState.READY: "ready",
    RuntimeState.STOPPING: "stopping",
    # A vLLM sleeper (router/runtime/sleep.py): `resident` counts its weights on the host.
    RuntimeState.SLEEPING: "ready",
    # A failed runtime is being stopped (TERM, grace, KILL): its memory is not free yet.
    RuntimeState.FAILED: "stopping",
}


@dataclass(frozen=True)
class Pending:
    """A load waiting for the runtimes its plan stops (`victims`: runtime keys); `since`: its
    oldest request's arrival, which opens the victims' batch window."""

    victims: frozenset[str]
    since: float
    # Victims asleep when planned (a vLLM sleeper's host memory): stopped, never slept again.
    asleep: frozenset[str] = frozenset()


class Uses:
    """Lease grants per runtime key within `RECENT_WINDOW` (and the last one)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._times: dict[str, deque[float]] = {}

    def note(self, key: str) -> None:
        self._times.setdefault(key, deque()).append(self._clock())

    def recent(self, key: str) -> int:
        times = self._times.get(key)
        if not times:
            return 0
        cutoff = self._clock() - RECENT_WINDOW
        while times and times[0] < cutoff:
            times.popleft()
        return len(times)

    def last(self, key: str) -> float:
        times = self._times.get(key)
        return times[-1] if times else 0.0


def held_here(need: Estimate, remote: int) -> Estimate:
    """A loaded spread model's estimate on this host: the whole less what the nodes hold."""
    if remote <= 0:
        return need
    return Estimate({"host": max(0, need.total - remote)}, need.source, {"spread": need.total})


def loaded_here(need: Estimate, ranks: int, remote: int) -> Estimate:
    """What a loaded runtime holds on this host: a vLLM gang's head its rank's part (as at its
    admission), a model spread over RPC nodes the whole less the nodes' layers."""
    return gang_share(need, ranks) if ranks > 1 else held_here(need, remote)


class Holdings:
    def __init__(
        self,
        settings: Settings,
        figures: Figures | None = None,
        devices: tuple[Device, ...] | None = None,
    ) -> None:
        self._settings = settings
        self.devices = machine_devices() if devices is None else devices
        memory = settings.memory
        self.budgets = budgets(self.devices, memory.host_budget, memory.gpu_budget, memory.reserve)
        self.figures: Figures = figures or NoFigures()
        self.uses = Uses()
        self._estimates: dict[tuple[str, str, str], Estimate] = {}
        self._fingerprints: dict[tuple[Any, ...], str] = {}
        self._weights_cache: dict[tuple[str, str, str], int] = {}
        self._refreshing: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        # Set at wiring on a master (router/app.py): does this runtime span lending nodes, and
        # how many of its bytes do they hold now (the borrower's leases; 0 before leasing)?
        self.spreads: Callable[[RuntimeSpec], bool] | None = None
        # How many processes of a vLLM gang share this runtime's model (1: none).
        self.ranks: Callable[[RuntimeSpec], int] | None = None
        self.remote: Callable[[str], int] | None = None

    @property
    def acts(self) -> bool:
        """`runtime.residency: memory`: loads are refused and evict by memory."""
        return self._settings.runtime.residency == "memory"

    # ---- what one runtime holds ------------------------------------------------------

    def _key(self, spec: RuntimeSpec) -> tuple[str, str, str]:
        return (spec.config.id, spec.config.config_sha256, spec.key)

    def estimate(self, spec: RuntimeSpec) -> Estimate:
        """The estimate (reads model headers once per configuration version)."""
        key = self._key(spec)
        found = self._estimates.get(key)
        if found is None:
            section = getattr(self._settings, PROGRAM_SECTIONS[spec.family])
            env = section.env if isinstance(section, ProgramSection) else {}
            found = estimate_config(spec.config, spec.lane, spec.family, self.devices, env)
            self._estimates[key] = found
        return found

    async def prepare(self, specs: Iterable[RuntimeSpec]) -> None:
        """Estimate what is not cached yet, off the event loop (header reads)."""
        missing = {self._key(s): s for s in specs if self._key(s) not in self._estimates}
        for spec in missing.values():
            await asyncio.to_thread(self.estimate, spec)

    def cached(self, spec: RuntimeSpec) -> bool:
        return self._key(spec) in self._estimates

    def refresh(self, specs: Iterable[RuntimeSpec]) -> None:
        """Estimate what is not cached yet in the background (one task per configuration
        version), so a status never waits for header reads (issue 32)."""
        for spec in specs:
            key = self._key(spec)
            if key not in self._estimates and key not in self._refreshing:
                task = asyncio.get_running_loop().create_task(self.prepare([spec]))
                self._refreshing[key] = task
                task.add_done_callback(functools.partial(self._refreshed, key))

    def _refreshed(self, key: tuple[str, str, str], _task: asyncio.Task[None]) -> None:
        self._refreshing.pop(key, None)

    def need(self, spec: RuntimeSpec) -> tuple[Estimate, float | None]:
        """(bytes per device and their source, measured load seconds): the measured (or, after
        an out-of-memory load, raised) figure when the store has one for this launch's
        fingerprint, else the estimate."""
        measured = self.figures.lookup(spec.config.id, self._fingerprint(spec))
        if measured is not None and measured.devices:
            return Estimate(dict(measured.devices), "measured"), measured.load_seconds
        return self.estimate(spec), None

    def _weights(self, spec: RuntimeSpec) -> int:
        """What a level-1 sleep moves to host RAM: the model's files (sleep.weights_size), read
        once per configuration version (a stat; the sleep decision itself stats them too)."""
        key = self._key(spec)
        found = self._weights_cache.get(key)
        if found is None:
            model = spec.config.model_file(spec.lane)
            found = weights_size(model) if model is not None else 0
            self._weights_cache[key] = found
        return found

    def _fingerprint(self, spec: RuntimeSpec) -> str:
        config = spec.config
        key = (*self._key(spec), tuple(sorted(config.asset_sha256.items())))
        found = self._fingerprints.get(key)
        if found is None:
            found = launch_fingerprint(config, spec.lane, spec.family, self._settings, self.devices)
            self._fingerprints[key] = found
        return found

    def resident(self, runtime: Runtime, waiting: int) -> Resident | None:
        state = _STATES.get(runtime.state)
        if state is None:
            return None
        need, load_seconds = self.need(runtime.spec)
        ranks = self.ranks(runtime.spec) if self.ranks is not None else 1
        if ranks > 1 or (self.remote is not None and need.source == "estimate"):
            remote = self.remote(runtime.key) if self.remote is not None else 0
            need = loaded_here(need, ranks, remote)
        if runtime.asleep:  # a vLLM sleeper (or one being stopped): its weights in host RAM
            need = Estimate({"host": self._weights(runtime.spec)}, "estimate")
        elif runtime.state is RuntimeState.SLEEPING:  # its sleep call is under way: leaving
            state = "stopping"
        # keep_alive's idle deadline (docs/residency.md): one past it costs nothing to evict;
        # one a client asked to keep (a positive keep_alive) is chosen only after the others.
        deadline = runtime.idle_deadline
        expired = deadline is not None and deadline <= time.time()
        kept = runtime.keep_alive is not None and runtime.keep_alive > 0
        return Resident(
            runtime.key,
            runtime.config.id,
            runtime.spec.lane.value,
            dict(need.devices),
            source=need.source,
            state=state,
            busy=runtime.leases > 0 or waiting > 0,
            pinned=runtime.config.pinned,
            load_seconds=load_seconds,
            recent_uses=0.0 if expired else float(self.uses.recent(runtime.key)),
            last_used=self.uses.last(runtime.key),
            in_flight=runtime.leases,
            kept=kept and not expired,
        )

    def ledger(self, residents: Iterable[Resident | None]) -> Ledger:
        return Ledger(self.budgets, tuple(r for r in residents if r is not None))

    # ---- the decision and the status --------------------------------------------------

    def load_need(self, ledger: Ledger, spec: RuntimeSpec, leaving: Iterable[str] = ()) -> Estimate:
        """What a load of `spec` needs here: its whole need, or, for a model spread over
        lending nodes, only the part the host keeps (the free room once it and `leaving` have
        exited, as the borrower's split takes it at launch)."""
        need, _ = self.need(spec)
        ranks = self.ranks(spec) if self.ranks is not None else 1
        if ranks > 1:  # a vLLM gang's head: its even part, as each follower's lease
            return gang_share(need, ranks)
        if self.spreads is None or not self.spreads(spec):
            return need
        for key in (spec.key, *leaving):
            ledger = ledger.exited(key)
        return local_share(need, ledger.free("host"))

    def plan(self, ledger: Ledger, spec: RuntimeSpec, forced: Mapping[str, str]) -> Plan:
        need = self.load_need(ledger, spec, forced)
        return eviction.plan(
            ledger, spec.config.id, spec.key, need, forced, act_on_memory=self.acts
        )

    def status(self, ledger: Ledger) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        """({runtime key: {"device", "bytes", "source", "by_device", "model", "lane"}}, the
        `devices` rows). The model and lane label the /metrics series."""
        per_runtime = {}
        for r in ledger.residents:
            usage = Usage.of(r)
            per_runtime[r.key] = {
                "model": r.model,
                "lane": r.lane,
                "device": usage.device,
                "bytes": usage.bytes,
                "source": usage.source,
                "by_device": dict(usage.by_device),
            }
        kinds = {d.id: d.kind for d in self.devices}
        rows = [row | {"kind": kinds.get(row["device"], "gpu")} for row in ledger.rows()]
        return per_runtime, rows


__all__ = ["RECENT_WINDOW", "Holdings", "Pending", "Uses"]
