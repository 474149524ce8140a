"""The image lane's memory for the app's life (kept under `appkeys.IMAGES`)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from router.runtime import Runtime

MAX_JOBS = 4096


@dataclass
class ImageLane:
    """Per-app image-lane memory: the model chosen with /sdapi/v1/options, and job owners."""

    remembered: str | None = None
    jobs: OrderedDict[str, Runtime] = field(default_factory=OrderedDict)
    watchers: set[asyncio.Task[None]] = field(default_factory=set)
    # Generations in flight on this node (token -> wall-clock start), for A1111's progress.
    generating: dict[int, float] = field(default_factory=dict)
    _tokens: itertools.count[int] = field(default_factory=itertools.count)

    def generation_started(self) -> int:
        token = next(self._tokens)
        self.generating[token] = time.time()
        return token

    def generation_ended(self, token: int) -> None:
        self.generating.pop(token, None)

    def oldest_generation(self) -> float | None:
        return min(self.generating.values(), default=None)

    def remember_job(self, job_id: str, runtime: Runtime) -> None:
        self.jobs[job_id] = runtime
        self.jobs.move_to_end(job_id)
        while len(self.jobs) > MAX_JOBS:
            self.jobs.popitem(last=False)
