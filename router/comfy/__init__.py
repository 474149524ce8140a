"""ComfyUI video emulation.

The pure half lives here: `workflow` (is a prompt a video job, and with which settings),
`media` (which uploads it uses, upload-name rules) and `requests` (backend bodies and the
/history record). Job running, uploads storage and /view are I/O and live elsewhere.
"""

from router.comfy.media import MediaRefs, check_upload_name, is_audio_upload, resolve_media
from router.comfy.requests import (
    KOBOLD_MAX_FRAMES,
    KOBOLD_MAX_REFERENCE_IMAGES,
    WORKFLOW_MEDIA_CAP,
    history_entry,
    kobold_txt2img,
    sdcpp_vid_gen,
)
from router.comfy.workflow import VideoPlan, inspect_workflow

__all__ = [
    "KOBOLD_MAX_FRAMES",
    "KOBOLD_MAX_REFERENCE_IMAGES",
    "WORKFLOW_MEDIA_CAP",
    "MediaRefs",
    "VideoPlan",
    "check_upload_name",
    "history_entry",
    "inspect_workflow",
    "is_audio_upload",
    "kobold_txt2img",
    "resolve_media",
    "sdcpp_vid_gen",
]
