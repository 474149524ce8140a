"""router/media/ffmpeg.py: finding a working ffmpeg and converting audio to 16 kHz mono WAV."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.media import ffmpeg

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    ffmpeg.forget()
    yield
    ffmpeg.forget()


async def _binary() -> str:
    found = await ffmpeg.locate("ffmpeg")
    if found is None:
        pytest.fail("no ffmpeg on PATH and no imageio-ffmpeg: `make test` installs both")
    return found


def _encode(binary: str, tmp: Path, name: str, codec: list[str]) -> bytes:
    target = tmp / name
    subprocess.run(
        [
            binary,
            "-hide_banner",
            "-loglevel",
            "error",
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=440:duration=0.5:sample_rate=44100",
            "-ac",
            "2",
            *codec,
            "-y",
            str(target),
        ],
        check=True,
        timeout=60,
    )
    return target.read_bytes()


@pytest.mark.parametrize(
    ("name", "codec"),
    [("tone.mp3", ["-c:a", "libmp3lame"]), ("tone.ogg", ["-c:a", "flac", "-f", "ogg"])],
)
async def test_converts_compressed_audio_to_16k_mono_wav(
    tmp_path: Path, name: str, codec: list[str]
) -> None:
    binary = await _binary()
    source = _encode(binary, tmp_path, name, codec)
    assert not ffmpeg.is_wav(source[:12])
    out = await ffmpeg.to_wav(source, binary=binary, scratch_base=tmp_path / "scratch")
    assert ffmpeg.is_wav(out[:12])
    with wave.open(io.BytesIO(out)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        assert 0.4 < w.getnframes() / 16000 < 0.7
    assert not any((tmp_path / "scratch").iterdir())  # noqa: ASYNC240 - scratch is gone


async def test_undecodable_input_is_an_ffmpeg_error(tmp_path: Path) -> None:
    binary = await _binary()
    with pytest.raises(ffmpeg.FfmpegError, match="could not convert"):
        await ffmpeg.to_wav(b"this is not audio", binary=binary, scratch_base=tmp_path)
    assert not any(tmp_path.iterdir())  # noqa: ASYNC240 - a test's own tmp dir


async def test_playlists_cannot_open_other_files(tmp_path: Path) -> None:
    binary = await _binary()
    local = _encode(binary, tmp_path, "local.wav", [])
    assert ffmpeg.is_wav(local[:12])
    playlist = f"#EXTM3U\n#EXTINF:1,\n{tmp_path / 'local.wav'}\n#EXT-X-ENDLIST\n".encode()
    with pytest.raises(ffmpeg.FfmpegError):
        await ffmpeg.to_wav(playlist, binary=binary, scratch_base=tmp_path / "scratch")
    concat = f"ffconcat version 1.0\nfile '{tmp_path / 'local.wav'}'\n".encode()
    with pytest.raises(ffmpeg.FfmpegError):
        await ffmpeg.to_wav(concat, binary=binary, scratch_base=tmp_path / "scratch")


async def test_settings_path_then_path_then_bundled(monkeypatch: pytest.MonkeyPatch) -> None:
    system = shutil.which("ffmpeg")
    if system is not None:
        assert await ffmpeg.locate(system) == system  # an explicit path is used as given
        ffmpeg.forget()
        assert await ffmpeg.locate("no-such-ffmpeg-binary") == system  # falls back to PATH
    ffmpeg.forget()
    monkeypatch.setattr(ffmpeg.shutil, "which", lambda name: None)
    bundled = ffmpeg._bundled()
    found = await ffmpeg.locate("/nonexistent/ffmpeg")
    assert found == bundled  # the imageio-ffmpeg wheel's binary, or None without it


async def test_missing_ffmpeg_is_none_and_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    probes: list[str] = []

    async def fake_works(binary: str) -> bool:
        probes.append(binary)
        return False

    monkeypatch.setattr(ffmpeg, "_works", fake_works)
    assert await ffmpeg.locate("ffmpeg") is None
    count = len(probes)
    assert await ffmpeg.locate("ffmpeg") is None
    assert len(probes) == count  # one probe per setting, not one per request


async def test_a_hung_program_is_killed_at_the_limit() -> None:
    with pytest.raises(ffmpeg.FfmpegError, match="did not finish"):
        await ffmpeg.run(["sleep", "30"], limit_s=0.2)


def test_wav_magic() -> None:
    assert ffmpeg.is_wav(b"RIFF\x00\x00\x00\x00WAVEfmt ")
    assert not ffmpeg.is_wav(b"RIFF\x00\x00\x00\x00AVI LIST")
    assert not ffmpeg.is_wav(b"ID3\x04")
