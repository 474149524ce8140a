"""ComfyUI video emulation.

Pure: `workflow` (is a prompt a video job, and with which settings), `media` (which uploads
it uses, upload-name rules) and `requests` (backend bodies and the /history record). With I/O:
`jobs` (the prompt registry and the background runner), `uploads` (the router's copies of
uploaded files), `transcode` (ffmpeg to MP4), `serve` (/view, byte ranges) and `state` (what
the app keeps). The face exports the pure half; handlers import the I/O modules by name.
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
