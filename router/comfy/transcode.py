"""Turn a backend's video container into the H.264/AAC MP4 a ComfyUI client expects.

ffmpeg runs with an argv list (never a shell), absolute paths only, the input demuxer forced
from the container's magic bytes and only the `file` protocol allowed: a backend's bytes must
never make ffmpeg open a URL (playlist demuxers would) or read another file.

Discovery and the runner are router/media/ffmpeg.py's (`locate`, `run`); this module adds the
video-specific argv.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from router.media.ffmpeg import FfmpegError, run

TRANSCODE_TIMEOUT = 600.0  # seconds; a clip the router can render is far shorter
_PROBE_TIMEOUT = 30.0


class TranscodeError(Exception):
    """ffmpeg refused the input or ran too long; the message is for the client."""


def container_of(data: bytes) -> tuple[str, str] | None:
    """(ffmpeg demuxer, file extension) for the containers the backends produce, by magic."""
    if data[:4] == b"RIFF" and data[8:12] == b"AVI ":
        return "avi", "avi"
    if data[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska", "webm"  # WebM is Matroska; the demuxer reads both
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif", "gif"
    if data[4:8] == b"ftyp":
        return "mov", "mp4"
    return None


def _input_args(demuxer: str, src: Path) -> list[str]:
    return ["-protocol_whitelist", "file", "-f", demuxer, "-i", str(src)]


async def has_audio(ffmpeg: str, src: Path, demuxer: str) -> bool:
    """Does the container carry an audio stream? Mapping a missing one makes ffmpeg fail."""
    argv = [ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error"]
    argv += [*_input_args(demuxer, src), "-map", "0:a:0", "-frames:a", "1", "-f", "null", "-"]
    try:
        code, _ = await run(argv, limit_s=_PROBE_TIMEOUT)
    except FfmpegError:
        return False
    return code == 0


def transcode_argv(ffmpeg: str, src: Path, dst: Path, demuxer: str, audio: bool) -> list[str]:
    """The whole ffmpeg command; with `audio` False a silent stereo track is muxed in, since
    players and ComfyUI's VHS preview expect an AAC stream in every clip."""
    if not (src.is_absolute() and dst.is_absolute()):
        raise ValueError("ffmpeg is only ever given absolute paths")
    argv = [ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    argv += _input_args(demuxer, src)
    if audio:
        argv += ["-map", "0:v:0", "-map", "0:a:0"]
    else:
        argv += ["-f", "lavfi", "-i", "anullsrc=channel_layout=stereo:sample_rate=44100"]
        argv += ["-map", "0:v:0", "-map", "1:a:0", "-shortest"]
    argv += ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"]
    # H.264 in yuv420p needs even dimensions.
    argv += ["-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2"]
    argv += ["-c:a", "aac", "-b:a", "128k", "-movflags", "+faststart", "-f", "mp4", str(dst)]
    return argv


def _private_output(dst: Path) -> bool:
    """Is there a non-empty regular file at `dst`? Then restrict it to this user."""
    if not dst.is_file() or dst.stat().st_size == 0:
        return False
    os.chmod(dst, 0o600)
    return True


async def transcode(
    ffmpeg: str, src: Path, dst: Path, demuxer: str, *, limit_s: float = TRANSCODE_TIMEOUT
) -> None:
    """Write `dst` (0600) from `src`; raises TranscodeError with ffmpeg's last words."""
    audio = await has_audio(ffmpeg, src, demuxer)
    argv = transcode_argv(ffmpeg, src, dst, demuxer, audio)
    try:
        code, err = await run(argv, limit_s=limit_s)
    except FfmpegError as exc:
        raise TranscodeError(str(exc)) from None
    if code != 0 or not await asyncio.to_thread(_private_output, dst):
        detail = err.strip().splitlines()[-1] if err.strip() else f"exit status {code}"
        raise TranscodeError(f"ffmpeg could not convert the backend's video: {detail}")
