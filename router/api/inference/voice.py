"""The voice lane: speech-to-text and text-to-speech (docs/media.md).

Speech-to-text (`/v1/audio/transcriptions`, `/v1/audio/translations`, `/api/extra/transcribe`)
goes to the configuration's voice runtime: KoboldCpp and vLLM take the request as sent;
whisper-server (backend_mode `llama_sdcpp`) needs the router's help:
- translations set `translate=true` (and `language=auto` unless the client names the spoken
  language), so the answer is always English;
- Kobold's JSON `{audio_data, prompt, langcode|language, suppress_non_speech}` becomes a
  multipart form, and the answer is whisper's `{"text": ...}`;
- audio must be WAV. A body within `limits.selector_scan_mb` is held, and non-WAV audio is
  converted to 16 kHz mono WAV with ffmpeg (refused with 400 `audio_not_wav` without one).
  A larger body streams through untouched (R26), so it must already be WAV.
Text-to-speech under `llama_sdcpp` is refused: llama-server has no speech endpoint.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, TypeVar

from aiohttp import web

from backends.whispercpp import INFERENCE_PATH
from router import inference as pipeline
from router.appkeys import CATALOG, SETTINGS
from router.config import ModelConfig
from router.domain import BackendMode, Family, Lane, MiB, family_for
from router.edge import Handler, matched_route, parse_json_object, upstream_request_headers
from router.errors import BadRequest, ModelNotFound, PayloadTooLarge
from router.forwarding import Selection, boundary_of, read_selector
from router.inference import Override, Upstream, choose_config
from router.media import FormPart, build_form, ffmpeg, field_part, parse_form, part_name, part_spans

_T = TypeVar("_T")
_TYPE_NAMES: dict[type, str] = {str: "string", bool: "boolean"}
TTS_REFUSED = (
    "text-to-speech is not available under backend_mode llama_sdcpp: llama-server has no "
    "/v1/audio/speech endpoint (llama.cpp removed --model-vocoder and --model-talker). Use a "
    "configuration with ttsmodel under backend_mode kobold or vllm."
)


async def _selection(request: web.Request) -> Selection:
    scan_limit = int(request.app[SETTINGS].limits.selector_scan_mb * MiB)
    return await read_selector(request, matched_route(request), scan_limit)


def _voice_family(config: ModelConfig) -> Family | None:
    return family_for(config.backend_mode, Lane.VOICE)


# ---- speech-to-text -------------------------------------------------------------------------


async def transcriptions(request: web.Request) -> web.StreamResponse:
    return await _stt(request, translate=False)


async def translations(request: web.Request) -> web.StreamResponse:
    return await _stt(request, translate=True)


async def _stt(request: web.Request, *, translate: bool) -> web.StreamResponse:
    sel = await _selection(request)
    if (relayed := await pipeline.relayed(request, sel, stt=True)) is not None:
        return relayed
    config = choose_config(request.app, sel.model, Lane.VOICE)
    model = sel.model or config.id
    family = _voice_family(config)
    if family is Family.WHISPERCPP:
        forced = {"translate": "true"} if translate else {}
        defaults = {"language": "auto"} if translate else {}
        return await _to_whisper(request, sel, model, forced, defaults)
    if family is Family.KOBOLD and translate:
        raise BadRequest(
            "KoboldCpp has no translation endpoint; use /v1/audio/transcriptions, or a "
            "configuration with whispermodel under backend_mode llama_sdcpp or vllm"
        )
    return await pipeline.forward(request, Selection(model, sel.prefix, sel.complete, sel.source))


async def kobold_transcribe(request: web.Request) -> web.StreamResponse:
    """`/api/extra/transcribe`: KoboldCpp takes it as sent; whisper-server gets a form."""
    sel = await _selection(request)
    if (relayed := await pipeline.relayed(request, sel, stt=True)) is not None:
        return relayed
    config = choose_config(request.app, sel.model, Lane.VOICE)
    model = sel.model or config.id
    if _voice_family(config) is not Family.WHISPERCPP:
        return await pipeline.forward(request, Selection(model, sel.prefix, sel.complete))
    forced = {"response_format": "json"}  # Kobold's answer is always {"text": ...}
    if boundary_of(request.headers.get("Content-Type", "")) is not None:
        return await _to_whisper(request, sel, model, forced, {})
    if not sel.complete:
        raise PayloadTooLarge(
            "a JSON transcription body must fit in limits.selector_scan_mb; send large audio as "
            "multipart/form-data to /v1/audio/transcriptions"
        )
    parts = _kobold_form(parse_json_object(sel.prefix))
    return await _send_form(request, model, parts, forced, {})


def _kobold_form(body: dict[str, Any]) -> list[FormPart]:
    audio = _decode_audio(body.get("audio_data"))
    parts = [FormPart("file", audio, "audio", "application/octet-stream")]
    language = _optional(body, "langcode", str) or _optional(body, "language", str)
    if language and language.strip():
        parts.append(FormPart("language", language.strip().encode()))
    if prompt := _optional(body, "prompt", str):
        parts.append(FormPart("prompt", prompt.encode()))
    suppress = _optional(body, "suppress_non_speech", bool)
    if suppress is not None:
        parts.append(FormPart("suppress_non_speech", str(suppress).lower().encode()))
    return parts


def _optional(body: dict[str, Any], name: str, kind: type[_T]) -> _T | None:
    """A field the router copies into whisper's form: absent/null, or of its one type."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, kind):
        raise BadRequest(f'"{name}" must be a {_TYPE_NAMES[kind]}', param=name)
    return value


def _decode_audio(value: Any) -> bytes:
    if not isinstance(value, str) or not value:
        raise BadRequest(
            '"audio_data" must be base64 audio (or a data:audio/... URL)', param="audio_data"
        )
    if value.startswith("data:"):
        value = value.partition(",")[2]
    try:
        return base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        raise BadRequest('"audio_data" is not valid base64', param="audio_data") from None


async def _to_whisper(
    request: web.Request,
    sel: Selection,
    model: str,
    forced: dict[str, str],
    defaults: dict[str, str],
) -> web.StreamResponse:
    boundary = boundary_of(request.headers.get("Content-Type", ""))
    if boundary is None:
        raise BadRequest("send the audio as multipart/form-data with a `file` field")
    if not sel.complete:
        return await _stream_to_whisper(request, sel, model, boundary, {**defaults, **forced})
    return await _send_form(request, model, parse_form(sel.prefix, boundary), forced, defaults)


async def _send_form(
    request: web.Request,
    model: str,
    parts: list[FormPart],
    forced: dict[str, str],
    defaults: dict[str, str],
) -> web.StreamResponse:
    """The buffered path: convert the audio to WAV if needed, set fields, forward the form."""
    audio = next((p for p in parts if p.name == "file"), None)
    if audio is None:
        raise BadRequest("no `file` field with the audio in the form")
    if not ffmpeg.is_wav(audio.data[:12]):
        audio.data = await _convert(request, audio.data)
        audio.filename, audio.content_type = "audio.wav", "audio/wav"
    present = {p.name for p in parts}
    parts = [p for p in parts if p.name not in forced]
    parts += [FormPart(k, v.encode()) for k, v in forced.items()]
    parts += [FormPart(k, v.encode()) for k, v in defaults.items() if k not in present]
    body, content_type = build_form(parts)
    headers = upstream_request_headers(
        request.headers, extra_drop=("x-tensors-model", "content-type")
    )
    headers["Content-Type"] = content_type
    override = Override(Selection(model, body, True), Upstream(INFERENCE_PATH, headers))
    return await pipeline.forward(request, override)


async def _convert(request: web.Request, audio: bytes) -> bytes:
    media = request.app[SETTINGS].media
    binary = await ffmpeg.locate(media.ffmpeg)
    if binary is None:
        raise BadRequest(
            "this audio is not WAV and no ffmpeg is available to convert it: install ffmpeg "
            "(or set media.ffmpeg), or send 16 kHz mono WAV",
            code="audio_not_wav",
        )
    try:
        return await ffmpeg.to_wav(audio, binary=binary, scratch_base=media.scratch_dir)
    except ffmpeg.FfmpegError as exc:
        raise BadRequest(str(exc), code="audio_conversion_failed") from None


async def _stream_to_whisper(
    request: web.Request, sel: Selection, model: str, boundary: str, fields: dict[str, str]
) -> web.StreamResponse:
    """The large-body path: the body streams through as it arrives, so only WAV is possible."""
    limit_mb = request.app[SETTINGS].limits.selector_scan_mb
    spans = [(part_name(raw), start) for raw, start, _ in part_spans(sel.prefix, boundary)]
    audio = [start for name, start in spans if name == "file"]
    if not audio or len(sel.prefix) < audio[0] + 12:
        raise BadRequest(
            f"the `file` part must start within the first {limit_mb:g} MB of a large upload"
        )
    start = audio[0]
    if not ffmpeg.is_wav(sel.prefix[start : start + 12]):
        raise BadRequest(
            f"uploads larger than {limit_mb:g} MB (limits.selector_scan_mb) stream straight to "
            "whisper-server, which needs WAV; ffmpeg conversion is not done on this path: "
            "convert to 16 kHz mono WAV first, or send a smaller file",
            code="audio_not_wav",
        )
    present = {name for name, _ in spans}
    delim = b"--" + boundary.encode("latin-1") + b"\r\n"
    # whisper-server reads the first value of a repeated field, so fields put first win.
    extra = b"".join(
        delim + field_part(k, v) + b"\r\n"
        for k, v in fields.items()
        if k == "translate" or k not in present
    )
    stream = Selection(model, extra + sel.prefix, False, sel.source)
    return await pipeline.forward(request, Override(stream, Upstream(INFERENCE_PATH)))


# ---- text-to-speech -------------------------------------------------------------------------


async def speech(request: web.Request) -> web.StreamResponse:
    """`/v1/audio/speech`, `/api/extra/tts` and the voice lists."""
    sel = await _selection(request)
    if (relayed := await pipeline.relayed(request, sel)) is not None:
        return relayed
    config = _speech_config(request, sel.model)
    if config.backend_mode is BackendMode.LLAMA_SDCPP:
        raise BadRequest(TTS_REFUSED)
    if config.backend_mode is BackendMode.KOBOLD and "ttsmodel" not in config.components:
        raise BadRequest(f"model {config.id!r} has no ttsmodel; name a configuration with one")
    model = sel.model or config.id
    return await pipeline.forward(request, Selection(model, sel.prefix, sel.complete, sel.source))


def _speech_config(request: web.Request, model: str | None) -> ModelConfig:
    if model is None:
        return choose_config(request.app, None, Lane.VOICE)
    # Resolved whatever its lanes, so a llama_sdcpp model gets the clear refusal below.
    config = request.app[CATALOG].resolve(model)
    if config is None:
        raise ModelNotFound(model)
    return config


HANDLERS: dict[str, Handler] = {
    "voice.transcriptions": transcriptions,
    "voice.translations": translations,
    "voice.transcribe": kobold_transcribe,
    "voice.speech": speech,
}
