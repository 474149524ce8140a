"""ComfyUI state for the app's life (kept under `appkeys.COMFY`): uploads and video jobs."""

from __future__ import annotations

from dataclasses import dataclass

from router.comfy.jobs import JobRunner
from router.comfy.uploads import UploadStore


@dataclass
class ComfyState:
    uploads: UploadStore
    jobs: JobRunner
