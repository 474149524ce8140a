"""Swap hooks: the work other parts do around one runtime's launch, readiness, drain and stop
(KV save and restore, read-ahead, vLLM sleep and wake, memory measurement), all through one
protocol. The manager holds one `SwapHooks`, a list of them, and calls it at each step; a hook
implements the steps it cares about and inherits the protocol's do-nothing defaults for the
rest. Every call is bounded by the hook itself and never raises (a swap never pays for a
hook's trouble).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from router.errors import RouterError
from router.runtime.loader import Launched, LaunchSpec
from router.runtime.state import Runtime


class SwapHook(Protocol):
    def launch_args(self, spec: LaunchSpec) -> list[str]:
        """Arguments the hook adds to the backend's argv (KV persistence's save folder)."""
        return []

    def before_launch(self, spec: LaunchSpec) -> None:
        """The process of `spec` is about to start (a read-ahead stops reading)."""
        return None

    async def after_ready(
        self, runtime: Runtime, launched: Launched, report: Sequence[str]
    ) -> None:
        """The backend answered ready; the runtime is not yet granted to anyone (KV restore,
        memory measurement from the backend's `report` lines)."""
        return None

    def load_failed(self, runtime: Runtime, error: RouterError) -> bool:
        """The load failed; True when it ran out of memory and a retry may fit (measuring)."""
        return False

    def on_drain(
        self,
        incoming: Sequence[LaunchSpec],
        resident: Iterable[LaunchSpec],
        wants: Callable[[str], bool],
    ) -> None:
        """Runtimes begin to drain so that `incoming[0]` can load (read its files ahead)."""
        return None

    def parks(self, runtime: Runtime) -> bool:
        """Park (vLLM sleep) instead of stopping this drained runtime?"""
        return False

    def would_park(self, runtime: Runtime) -> bool:
        """`parks` asked ahead of a swap (the queue ETA prices a sleep): cheap and silent."""
        return False

    async def park(self, runtime: Runtime) -> bool:
        """Park it; False when that failed (it is then stopped)."""
        return False

    async def unpark(self, runtime: Runtime) -> bool:
        """Bring a parked runtime back; False when that failed (it is then stopped)."""
        return False

    async def before_stop(self, runtime: Runtime) -> None:
        """A drained runtime is about to be signalled (KV save)."""
        return None


class SwapHooks:
    """The hooks in the order given; each step calls every hook. A runtime is parked by the
    first hook that `parks` it, and only that hook brings it back."""

    def __init__(self, hooks: Iterable[SwapHook] = ()) -> None:
        self._hooks = tuple(hooks)
        self._parked: dict[str, SwapHook] = {}

    @property
    def empty(self) -> bool:
        """No hook: nothing happens around a swap (the ETA counts no save or restore)."""
        return not self._hooks

    def launch_args(self, spec: LaunchSpec) -> list[str]:
        return [arg for hook in self._hooks for arg in hook.launch_args(spec)]

    def before_launch(self, spec: LaunchSpec) -> None:
        for hook in self._hooks:
            hook.before_launch(spec)

    async def after_ready(
        self, runtime: Runtime, launched: Launched, report: Sequence[str]
    ) -> None:
        for hook in self._hooks:
            await hook.after_ready(runtime, launched, report)

    def load_failed(self, runtime: Runtime, error: RouterError) -> bool:
        return any([hook.load_failed(runtime, error) for hook in self._hooks])  # every hook hears

    def on_drain(
        self,
        incoming: Sequence[LaunchSpec],
        resident: Iterable[LaunchSpec],
        wants: Callable[[str], bool],
    ) -> None:
        resident = list(resident)
        for hook in self._hooks:
            hook.on_drain(incoming, resident, wants)

    def parks(self, runtime: Runtime) -> bool:
        hook = next((h for h in self._hooks if h.parks(runtime)), None)
        if hook is None:
            return False
        self._parked[runtime.key] = hook
        return True

    def would_park(self, runtime: Runtime) -> bool:
        return any(h.would_park(runtime) for h in self._hooks)

    async def park(self, runtime: Runtime) -> bool:
        hook = self._parked.get(runtime.key)
        return hook is not None and await hook.park(runtime)

    async def unpark(self, runtime: Runtime) -> bool:
        hook = self._parked.pop(runtime.key, None)
        return hook is not None and await hook.unpark(runtime)

    async def before_stop(self, runtime: Runtime) -> None:
        self._parked.pop(runtime.key, None)
        for hook in self._hooks:
            await hook.before_stop(runtime)


__all__ = ["SwapHook", "SwapHooks"]
