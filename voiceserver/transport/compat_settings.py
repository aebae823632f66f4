"""One ``session.config`` of the vllm-omni socket, checked and turned into what it runs with.

Departures from vllm-omni (docs/vllm-socket.md says why): the output rate is 24 kHz
unless ``sample_rate`` picks another (vllm-omni sends its model's rate, 24 kHz for
Qwen3-TTS; ours must not depend on the loaded model); ``split_granularity`` left out
means ``clause``; vllm-omni's ``word_timestamps`` need ``pcm`` because they ride
``audio.chunk`` messages of raw PCM (vllm-omni also needs ``stream_audio``; here asking
for them implies it), Baseten's ``timestamp_type: "word"`` leaves the audio as it is
and takes any format; ``streaming_mode: "token_level"`` streams the audio (vllm-omni:
``pcm`` only; here any format ``stream_audio`` can send).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from models.base import SynthParams
from protocol.compat_vllm import TimestampStrategy, VllmSessionConfig
from protocol.errors import ProtocolError
from protocol.validation import check_text
from voiceserver.audio import AudioFormat
from voiceserver.audio.containers import DEFAULT_SAMPLE_RATE, SAMPLE_RATES
from voiceserver.params import resolve_params
from voiceserver.runtime import Runtime
from voiceserver.text.segmenter import SegmenterConfig

STREAMABLE_FORMATS = ("pcm", "wav", "opus")
"""``response_format`` values that ``stream_audio`` can send piece by piece."""

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A ``session.config`` that cannot be applied; ``field`` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        """``message`` is the whole text the client gets, naming ``field`` itself."""
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class AudioSpec:
    """What is sent for each sentence."""

    response_format: str
    """vllm-omni's ``response_format``: wav, pcm, flac, mp3 or opus."""
    stream: bool
    """Audio goes out as it is made (``stream_audio``), not as one file per sentence."""
    sample_rate: int
    """Rate of the audio sent: ``sample_rate`` of the config, else 24 kHz."""
    word_chunks: bool = False
    """vllm-omni's word timestamps: PCM goes out in ``audio.chunk`` messages (base64),
    and each sentence ends with an empty one carrying its timings."""
    timestamp_info: TimestampStrategy | None = None
    """Baseten's word timestamps (``timestamp_type: "word"``), the audio left as it is:
    ``sync``, each sentence's in its ``audio.done``; ``async``, in ``timestamps``
    messages after the utterance's audio; None: off."""

    @property
    def word_timings(self) -> bool:
        """Some form of word timestamps is on: the engine times the words."""
        return self.word_chunks or self.timestamp_info is not None

    @property
    def wire_format(self) -> AudioFormat:
        """What the output stage makes: s16le PCM, or Ogg/Opus for ``opus``."""
        if self.response_format == "opus":
            return AudioFormat("opus", self.sample_rate, "ogg")
        return AudioFormat("pcm_s16le", self.sample_rate)


@dataclass(frozen=True)
class CompatSettings:
    """One applied ``session.config``."""

    params: SynthParams
    """Voice, language, speed and model extras, checked against the loaded model."""
    audio: AudioSpec
    """Format, rate and framing of the audio sent."""
    segmenter: SegmenterConfig
    """How ``input.text`` is cut into sentences (``split_granularity``)."""
    initial_codec_chunk_frames: int | None = None
    """vllm-omni's size of a context's first audio chunk, in codec frames (None: the
    engine's own). Kept for the context open call; see ``open_sentence``."""
    task_type: str | None = None
    """vllm-omni's ``task_type`` as sent (CustomVoice | VoiceDesign | Base)."""
    token_level: bool = False
    """``streaming_mode: "token_level"``: each utterance is one engine context, opened by
    its first ``input.text`` and fed the later ones as they come."""


def _check_texts(cfg: VllmSessionConfig) -> None:
    for name in ("instructions", "ref_text"):
        value = getattr(cfg, name)
        if value is not None:
            try:
                check_text(value, name)
            except ProtocolError as err:
                raise ConfigError(name, err.message) from None


def audio_spec(cfg: VllmSessionConfig) -> AudioSpec:
    """Format, rate and framing asked for; raises ConfigError naming the field."""
    fmt = cfg.response_format
    words = cfg.word_timestamps
    if words and fmt != "pcm":
        raise ConfigError(
            "word_timestamps",
            "word_timestamps: word timestamps come in audio.chunk messages of raw PCM; set"
            f' response_format to "pcm" (got {fmt!r}), or ask for timestamp_type "word" (the'
            " audio stays binary, the timings come in audio.done)",
        )
    if cfg.streaming_mode == "sentence_commit":
        raise ConfigError(
            "streaming_mode",
            "streaming_mode: 'sentence_commit' is not offered by this server; allowed:"
            " 'sentence', 'token_level'",
        )
    for asked, why in ((cfg.stream_audio, "stream_audio=true"), (cfg.token_level, "token_level")):
        if asked and fmt not in STREAMABLE_FORMATS:
            raise ConfigError(
                "response_format",
                f"response_format: {fmt!r} cannot be streamed; with {why} use one of:"
                f" {', '.join(STREAMABLE_FORMATS)}",
            )
    rates = SAMPLE_RATES[fmt]
    rate = DEFAULT_SAMPLE_RATE if cfg.sample_rate is None else cfg.sample_rate
    if rate not in rates:
        raise ConfigError(
            "sample_rate",
            f"sample_rate: {rate} Hz is not offered for {fmt}; allowed: {', '.join(map(str, rates))}",
        )
    spec = AudioSpec(
        fmt,
        cfg.stream_audio or words or cfg.token_level,
        rate,
        word_chunks=words,
        timestamp_info=cfg.timestamp_strategy if cfg.wants_timestamp_info else None,
    )
    spec.wire_format.validate()
    return spec


def settings_from_config(
    rt: Runtime, cfg: VllmSessionConfig, ref_audio: object = None
) -> CompatSettings:
    """Validate a ``session.config`` against the loaded model; raises ConfigError or
    ModelInputError naming what to change. ``ref_audio``: the config's, with a path
    or URL already replaced by the bytes it names (see ``load_named_media``)."""
    _check_texts(cfg)
    audio = audio_spec(cfg)
    # vllm-omni's model fields under its own names; voiceserver.params maps and checks them.
    extra: dict[str, Any] = {
        "ref_audio": cfg.ref_audio if ref_audio is None else ref_audio,
        "ref_text": cfg.ref_text,
        "x_vector_only_mode": cfg.x_vector_only_mode,
        "speaker_embedding": cfg.speaker_embedding,
        "seed": cfg.seed,
        "max_new_tokens": cfg.max_new_tokens,
        "non_streaming_mode": cfg.non_streaming_mode,
    }
    warnings: list[str] = []
    params = resolve_params(
        rt,
        model=cfg.model,
        voice=cfg.effective_voice,
        language=cfg.language,
        speed=1.0 if cfg.speed is None else cfg.speed,
        instructions=cfg.instructions,
        options=cfg.options,
        extra=extra,
        task_type=cfg.task_type,
        warnings=warnings,
    )
    for warning in warnings:  # the socket's protocol has no warning message
        log.info("vllm socket session.config: %s", warning)
    # The model's segmenter, timers included: a finished sentence is spoken at once and
    # text without a boundary waits at most max_delay_ms, as on the native socket.
    base = replace(rt.model_config.segmenter, mode="auto")
    split = cfg.effective_split
    segmenter = base.with_split("auto" if split == "clause" else split)
    return CompatSettings(
        params,
        audio,
        segmenter,
        initial_codec_chunk_frames=cfg.initial_codec_chunk_frames,
        task_type=cfg.task_type,
        token_level=cfg.token_level,
    )
