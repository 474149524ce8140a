"""Find a working ffmpeg and run it safely: argv only (never a shell), on files in a private
scratch directory that is removed afterwards.

Where ffmpeg comes from, first that works wins:
1. `media.ffmpeg` in the settings: a path, or a bare name looked up on PATH (default "ffmpeg");
2. `ffmpeg` on PATH (when the setting named something else that is missing);
3. the binary bundled with the `imageio-ffmpeg` wheel, when that package is installed.
"Works" means `ffmpeg -version` exits 0 within a few seconds; the answer is cached per setting,
so a missing ffmpeg costs one probe, not one per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 10.0
CONVERT_TIMEOUT = 300.0
_STDERR_TAIL = 400
AUDIO_DEMUXERS = "wav,w64,mp3,ogg,flac,aac,mov,mp4,m4a,3gp,matroska,webm,aiff,caf,amr,au,asf,avi"
_cache: dict[str, str | None] = {}


class FfmpegError(Exception):
    """ffmpeg is missing, failed, or took too long; the message is safe to show a client."""


def _candidates(configured: str) -> list[str]:
    found: list[str] = []
    if os.sep in configured or (os.altsep and os.altsep in configured):
        found.append(configured)
    elif (hit := shutil.which(configured)) is not None:
        found.append(hit)
    if (hit := shutil.which("ffmpeg")) is not None:
        found.append(hit)
    bundled = _bundled()
    if bundled is not None:
        found.append(bundled)
    return list(dict.fromkeys(found))


def _bundled() -> str | None:
    """The imageio-ffmpeg wheel's binary, when that optional package is installed."""
    try:
        import imageio_ffmpeg

        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except Exception:  # not installed, or no binary for this platform
        return None


async def _works(binary: str) -> bool:
    try:
        rc, _ = await run([binary, "-hide_banner", "-version"], limit_s=PROBE_TIMEOUT)
    except (FfmpegError, OSError):
        return False
    return rc == 0


async def locate(configured: str = "ffmpeg") -> str | None:
    """A working ffmpeg binary for the `media.ffmpeg` setting, or None (cached per setting)."""
    if configured in _cache:
        return _cache[configured]
    found = None
    for candidate in _candidates(configured):
        if await _works(candidate):
            found = candidate
            break
    if found is None:
        log.warning("no working ffmpeg (media.ffmpeg=%r, PATH, imageio-ffmpeg)", configured)
    _cache[configured] = found
    return found


def forget() -> None:
    """Drop cached answers (tests; an operator who installs ffmpeg needs no restart otherwise)."""
    _cache.clear()


async def run(argv: Sequence[str], *, limit_s: float) -> tuple[int, str]:
    """Run a program without a shell; returns (exit code, tail of stderr). Kills on timeout."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # a timeout kill never reaches the router's process group
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), limit_s)
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise FfmpegError(f"ffmpeg did not finish within {limit_s:g}s") from None
    tail = err.decode("utf-8", "replace")[-_STDERR_TAIL:].strip()
    return proc.returncode or 0, tail


@contextlib.contextmanager
def scratch(base: Path | None = None) -> Iterator[Path]:
    """A private (0700) directory under `media.scratch_dir` (or the system temp), removed after."""
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="tensor-router-", dir=base))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def wav_argv(binary: str, source: Path, target: Path) -> list[str]:
    """16 kHz mono PCM WAV, what whisper.cpp decodes natively (its own `--convert` does this)."""
    return [
        binary,
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        # A "media" file may be a playlist (HLS, concat) naming other files or URLs: only
        # plain audio containers may open it, and only as a local file.
        "-protocol_whitelist",
        "file",
        "-format_whitelist",
        AUDIO_DEMUXERS,
        "-i",
        str(source),
        "-vn",
        "-ar",
        "16000",
        "-ac",
        "1",
        "-c:a",
        "pcm_s16le",
        "-f",
        "wav",
        "-y",
        str(target),
    ]


async def to_wav(data: bytes, *, binary: str, scratch_base: Path | None = None) -> bytes:
    """Convert any audio ffmpeg can decode to 16 kHz mono WAV; FfmpegError when it cannot."""
    with scratch(scratch_base) as folder:
        source, target = folder / "input", folder / "output.wav"
        await asyncio.to_thread(source.write_bytes, data)
        rc, err = await run(wav_argv(binary, source, target), limit_s=CONVERT_TIMEOUT)
        if rc != 0 or not target.exists():
            detail = err.splitlines()[-1] if err else f"exit code {rc}"
            raise FfmpegError(f"ffmpeg could not convert the audio to WAV: {detail}")
        return await asyncio.to_thread(target.read_bytes)


def is_wav(head: bytes) -> bool:
    """RIFF/RF64 WAVE magic: the only container split-mode transcription takes unconverted."""
    return len(head) >= 12 and head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE"
