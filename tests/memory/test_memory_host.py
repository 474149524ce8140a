"""Host room (router/memory/host.py): what the read-ahead and the vLLM sleep may take of host
memory, judged over the ledger with `memory.reserve` (docs/residency.md, "Where memory is
judged"). The wiring into both hooks is tested with the real router: tests/runtime/
test_readahead_swap.py and test_vllm_sleep_memory.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.memory.host import HostRoom, host_room
from router.memory.ledger import Ledger, Resident

GIB = 1 << 30
sizes = st.integers(min_value=0, max_value=1 << 40)


def ledger(budget: int, *held: tuple[str, dict[str, int]]) -> Ledger:
    residents = tuple(Resident(key=k, model=k, lane="text", devices=d) for k, d in held)
    return Ledger({"host": budget, "gpu0": 8 * GIB}, residents)


# Moved from tests/runtime/test_readahead_plan.py (the read-ahead's own `room`, now this rule):
# the resident bytes are the ledger's, and the reserve is kept off what is available.
@given(sizes, sizes, sizes, sizes)
def test_room_is_the_budget_less_residents_and_never_above_available(
    budget: int, resident: int, available: int, reserve: int
) -> None:
    got = host_room(ledger(budget, ("out", {"host": resident})), available, reserve)
    assert 0 <= got <= max(0, available - reserve)
    assert got <= max(0, budget - resident)
    assert got == max(0, min(budget - resident, available - reserve))


def test_room_examples() -> None:
    out = ("out", {"host": 4 * GIB})
    assert host_room(ledger(15 * GIB, out), 20 * GIB, 0) == 11 * GIB  # budget less the outgoing
    assert host_room(ledger(15 * GIB, out), 2 * GIB, 0) == 2 * GIB  # little memory free now
    over = ("out", {"host": 6 * GIB})
    assert host_room(ledger(4 * GIB, over), 20 * GIB, 0) == 0  # residents over budget: none
    # memory.reserve stays free of what the kernel reports available.
    assert host_room(ledger(15 * GIB, out), 2 * GIB, GIB) == 1 * GIB
    assert host_room(ledger(15 * GIB, out), 20 * GIB, GIB) == 11 * GIB  # the budget binds
    assert host_room(ledger(15 * GIB, out), GIB // 2, GIB) == 0
    # A runtime's GPU bytes take no host room.
    gpu = ("gpu", {"host": GIB, "gpu0": 7 * GIB})
    assert host_room(ledger(15 * GIB, gpu), 20 * GIB, 0) == 14 * GIB


def test_host_room_asks_the_live_ledger_each_time_and_can_leave_one_runtime_out() -> None:
    """The sleep asks with `replacing`: asleep, the ledger counts the weights in place of
    the runtime's own figure, so its entry is not counted twice."""
    current = [ledger(10 * GIB, ("a", {"host": 3 * GIB}), ("b", {"host": 2 * GIB}))]
    seen: list[int] = []

    def available() -> int:
        seen.append(1)
        return 9 * GIB

    host = HostRoom(lambda: current[0], GIB, available)
    assert host.room() == 5 * GIB
    assert host.room(replacing="a") == 8 * GIB  # 10 GiB less b's 2 GiB; 9 GiB less the reserve
    assert host.room(replacing="absent") == 5 * GIB
    current[0] = current[0].exited("b")  # the ledger moved on: the next answer follows it
    assert host.room() == 7 * GIB
    assert len(seen) == 4  # available memory is read at every question, never cached
