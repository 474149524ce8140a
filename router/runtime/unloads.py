"""Stopping runtimes on request: `/router/v1/unload` (by lanes, config or family) and Ollama's
unload (`keep_alive: 0` with nothing to generate).

A runtime in a lane's slot is only marked (`unload_requested`): the pump drains and stops it
once its running work is done, like any other stop. An asleep one (vLLM sleep, router/runtime/
sleep.py) is in no slot, so the pump would never see it: its stop begins here. Choosing and
marking happen in one step, so a swap cannot slip in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from router.config import ModelConfig
from router.domain import Family, Lane
from router.runtime.lifecycle import Lifecycle
from router.runtime.state import Runtime, RuntimeState, spec_for
from router.runtime.table import Table


def unload_targets(
    runtimes: Iterable[Runtime], lanes: frozenset[Lane], model: str | None, family: Family | None
) -> tuple[set[Runtime], set[Runtime]]:
    """The runtimes an unload names, as (in a lane's slot, asleep): every one occupying one of
    `lanes`, narrowed to config `model` and to `family` when given."""
    named = [
        rt
        for rt in runtimes
        if rt.spec.occupies & lanes
        and model in (None, rt.config.id)
        and family in (None, rt.spec.family)
    ]
    asleep = {rt for rt in named if rt.state is RuntimeState.SLEEPING}
    return set(named) - asleep, asleep


class Unloads:
    """The manager's unload and expire: marks, begins the stops of sleepers, runs the pump
    (`run`) and waits until the named runtimes are gone."""

    def __init__(self, table: Table, life: Lifecycle, run: Callable[[], None]) -> None:
        self._table, self._life, self._run = table, life, run

    async def unload(
        self, lanes: frozenset[Lane], model: str | None, family: Family | None
    ) -> list[str]:
        slotted, asleep = unload_targets(self._table.runtimes.values(), lanes, model, family)
        for runtime in slotted:
            runtime.unload_requested = True
        for runtime in asleep:
            self._life.begin_stop(runtime)
        targets = slotted | asleep
        self._run()
        await asyncio.gather(*(rt.gone.wait() for rt in targets))
        return sorted(rt.key for rt in targets)

    async def expire(self, config: ModelConfig, lane: Lane) -> bool:
        runtime = self._table.runtimes.get(spec_for(config, lane).key)
        if runtime is None:
            return False
        runtime.keep_alive = 0.0
        runtime.unload_requested = True
        if runtime.state is RuntimeState.SLEEPING:  # in no slot: the pump would not see it
            self._life.begin_stop(runtime)
        self._run()
        await runtime.gone.wait()
        return True
