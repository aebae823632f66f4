"""What ElevenLabs' ids and query parameters mean on this server (sockets and HTTP).

- A ``voice_id`` is the name of one of the served model's voices (built-in, or
  uploaded with ``POST /v1/audio/voices``), in any case; ``GET /v1/voices`` lists them.
  Any other id is ``voice_not_found``.
- A ``model_id`` of ElevenLabs' (``eleven_flash_v2_5``, ``eleven_turbo_v2_5``,
  ``eleven_multilingual_v2``...) or one of the served model's own names means the
  loaded model; anything else is ``model_not_found``.
- ``language_code`` picks one of the model's languages; one it does not speak is
  ignored, as ElevenLabs ignores a code its model does not support.
- ``output_format`` picks the encoding (``protocol.compat_elevenlabs.FormatSpec``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from models.base import ModelInputError, SynthParams
from protocol.compat_elevenlabs import (
    ELEVENLABS_MODELS,
    FormatSpec,
    SocketQuery,
    convert_query,
    is_elevenlabs_model,
    parse_output_format,
)
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import OutputFormat
from voiceserver.languages import resolve_language
from voiceserver.logs import Throttled
from voiceserver.params import resolve_params
from voiceserver.runtime import Runtime

log = logging.getLogger(__name__)
ignored = Throttled(log)

DEFAULT_INACTIVITY_S = 20.0
"""ElevenLabs' ``inactivity_timeout`` when a socket sets none."""


def check_model(rt: Runtime, model_id: str | None) -> None:
    """ProtocolError (unknown_model) unless ``model_id`` names the loaded model."""
    if model_id is None or is_elevenlabs_model(model_id) or model_id in rt.model_names:
        return
    raise ProtocolError(
        ErrorCode.UNKNOWN_MODEL,
        f"`model_id`: {model_id[:64]!r} is not served here; ElevenLabs' model ids"
        f" ({', '.join(ELEVENLABS_MODELS[:3])}, ...) and this server's names"
        f" ({', '.join(rt.model_names.names)}) all name its loaded model",
        param="model_id",
    )


def language_of(rt: Runtime, code: str | None) -> str | None:
    """The model's spelling of ``language_code``; None (the model's default) when it is
    absent or a language the model does not speak (ignored, as ElevenLabs does)."""
    if code is None:
        return None
    try:
        return resolve_language(code, rt.model.capabilities.languages)
    except ModelInputError:
        ignored.log(
            logging.INFO,
            "language",
            "ElevenLabs API: language_code %r ignored: the served model speaks %s",
            code[:64],
            ", ".join(rt.model.capabilities.languages),
        )
        return None


def canonical_voice(rt: Runtime, voice_id: str) -> str:
    """The served spelling of a voice id given in any case (others are left as they are)."""
    builtin = rt.voices.builtin.get(voice_id.lower())
    if builtin is not None:
        return builtin
    stored = rt.voices.find(voice_id)
    return stored.record.name if stored is not None else voice_id


def speech_params(
    rt: Runtime,
    voice_id: str,
    *,
    language: str | None = None,
    speed: float | None = None,
    seed: int | None = None,
    warnings: list[str] | None = None,
) -> SynthParams:
    """The engine's settings for ``voice_id``; ProtocolError naming what is wrong (an
    unknown voice is ``voice_not_found``, listing the voice ids there are)."""
    extra: dict[str, Any] = {} if seed is None else {"seed": seed}
    try:
        return resolve_params(
            rt,
            voice=canonical_voice(rt, voice_id),
            language=language,
            speed=1.0 if speed is None else speed,
            extra=extra,
            warnings=warnings,
        )
    except ModelInputError as err:
        if err.code == ErrorCode.UNKNOWN_VOICE:
            raise ProtocolError(
                ErrorCode.UNKNOWN_VOICE,
                f"A voice with the voice_id {voice_id[:64]!r} was not found; voice ids here:"
                f" {', '.join(voice_ids(rt)[:20])} (GET /v1/voices lists them)",
                param="voice_id",
            ) from None
        code = err.code if err.code in ErrorCode.__members__.values() else "invalid_field"
        raise ProtocolError(ErrorCode(code), str(err), param=err.param) from None


def voice_ids(rt: Runtime) -> list[str]:
    """Every voice id a client may name: the model's voices, then the uploaded ones."""
    builtin = [voice.name for voice in rt.model.capabilities.voices]
    return [*builtin, *rt.voices.names()]


def native_output(spec: FormatSpec) -> OutputFormat | None:
    """The native socket format that is ``spec`` byte for byte, or None when the
    session encodes it itself (mp3, and rates the native socket does not offer)."""
    if spec.codec == "pcm" and spec.sample_rate != 32000:
        return OutputFormat(encoding="pcm_s16le", sample_rate=spec.sample_rate)  # type: ignore[arg-type]
    if spec.codec in ("ulaw", "alaw"):
        encoding = "pcm_mulaw" if spec.codec == "ulaw" else "pcm_alaw"
        return OutputFormat(encoding=encoding, sample_rate=spec.sample_rate)  # type: ignore[arg-type]
    if spec.codec == "opus":
        assert spec.kbps is not None
        return OutputFormat(
            encoding="opus",
            sample_rate=spec.sample_rate,  # type: ignore[arg-type]
            container="ogg",
            bitrate=spec.kbps * 1000,
        )
    return None


PLACEHOLDER_OUTPUT = OutputFormat()
"""What a context whose audio the session encodes itself asks the native stage for
(replaced before any audio; see ``compat_elevenlabs.ElevenLabsSpeech``)."""


@dataclass(frozen=True)
class SocketSetup:
    """Everything a socket's query and path decide, checked before the first message."""

    spec: FormatSpec
    voice: str | None
    """The socket's voice (None: each context names its own, as on text-to-dialogue)."""
    language: str | None
    aligned: bool
    """The model times words for these settings: alignment is sent."""
    auto_mode: bool
    sync_alignment: bool
    """Alignment times count from each context's first sample."""
    ssml: bool
    """``enable_ssml_parsing``: tags are taken out of the text."""
    idle_timeout_s: float

    @property
    def output(self) -> OutputFormat:
        return native_output(self.spec) or PLACEHOLDER_OUTPUT


def socket_setup(rt: Runtime, voice_id: str | None, query: dict[str, str]) -> SocketSetup:
    """The socket's settings from its path and query; ProtocolError naming a bad one.
    ``voice_id`` None: the contexts name their voices (the model's default is checked)."""
    params = convert_query(query, SocketQuery)
    check_model(rt, params.model_id)
    spec = parse_output_format(params.output_format, socket=True)
    language = language_of(rt, params.language_code)
    default = rt.model.capabilities.default_voice
    synth = speech_params(rt, voice_id if voice_id is not None else default, language=language)
    timeout = params.inactivity_timeout or DEFAULT_INACTIVITY_S
    return SocketSetup(
        spec=spec,
        voice=None if voice_id is None else canonical_voice(rt, voice_id),
        language=language,
        aligned=rt.model.runner.aligns_words(synth),
        auto_mode=bool(params.auto_mode),
        sync_alignment=bool(params.sync_alignment),
        ssml=bool(params.enable_ssml_parsing),
        idle_timeout_s=min(timeout, rt.server.limits.idle_timeout_s),
    )
