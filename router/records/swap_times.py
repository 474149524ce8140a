"""How long the parts of a swap take besides the load (issue 32; the queue ETA's swap cost).

Per configuration id, the median of the last few of each: the swap hooks' work before a stop
(the KV save), the stop itself (TERM to exit) and the hooks' work after a load (the KV restore,
the memory measurement), and a vLLM sleep and wake in place of a stop and a load. The
lifecycle feeds them as it does each part
(router/runtime/lifecycle.py); `router/runtime/swap_cost.py` counts them. Like
`RequestTimes`, nothing is seeded from the store: a part this process never saw for a
configuration is missing, and an ETA that needs it says `null`.
"""

from __future__ import annotations

from router.records.request_times import RequestTimes


class SwapTimes:
    def __init__(self) -> None:
        self.save = RequestTimes()
        self.stop = RequestTimes()
        self.restore = RequestTimes()
        self.sleep = RequestTimes()  # the sleep call, to asleep (router/runtime/sleep.py)
        self.wake = RequestTimes()  # the wake call, to serving again


__all__ = ["SwapTimes"]
