"""Parsing and validation of one ``POST /v1/audio/speech`` body (and of each batch item).

What the fields mean is in docs/http.md. A body becomes a :class:`SpeechRequest`
or an ApiError (400 naming the field and what is allowed; 404 for an unknown
model). Model options arrive in ``options`` (strict: names the served model
declares), in ``extra_params`` and under vllm-omni's top-level names
(:data:`WIRE_FIELDS`, lenient); ``voiceserver.params`` checks both against the
model's declaration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.base import INT64, ModelInputError, SynthParams
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import INSTRUCTIONS_MAX_LEN, OPTIONS_MAX, SPEED_MAX, SPEED_MIN
from protocol.validation import check_text
from voiceserver.audio.containers import (
    DEFAULT_RESPONSE_FORMAT,
    DEFAULT_SAMPLE_RATE,
    RESPONSE_FORMATS,
    SAMPLE_RATES,
)
from voiceserver.clients import ClientId
from voiceserver.http.errors import ApiError, from_model_error, invalid
from voiceserver.names import is_openai_model, openai_voice
from voiceserver.params import resolve_params
from voiceserver.runtime import Runtime
from voiceserver.tasks import TASK_TYPES

STREAM_FORMATS = ("audio", "sse")
WIRE_FIELDS = (
    "ref_audio",
    "ref_text",
    "speaker_embedding",
    "x_vector_only_mode",
    "non_streaming_mode",
    "streaming_text",
    "seed",
    "max_new_tokens",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
)
"""Model fields clients send at the top level (vllm-omni's, and sampling settings):
checked against the served model's fields, ignored by a model that has none."""


@dataclass(frozen=True)
class SpeechRequest:
    """One validated synthesis request."""

    text: str
    params: SynthParams
    response_format: str
    sample_rate: int
    stream_format: str
    whole_file: bool = False
    """One whole file with its true length in its header (``stream: false``,
    batch items) instead of a stream."""
    warnings: tuple[str, ...] = ()
    """What the request asked for that is ignored (sent as ``Warning`` headers)."""


class _Fields:
    """Typed reads of a JSON object; null counts as absent (as in vllm-omni)."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body

    def present(self, key: str) -> bool:
        return self.body.get(key) is not None

    def string(self, key: str) -> str | None:
        value = self.body.get(key)
        if value is not None and not isinstance(value, str):
            raise invalid(key, f"must be a string, got {_kind(value)}")
        return value

    def text(self, key: str, limit: int) -> str | None:
        """A string to be spoken or read by a model: plain text within ``limit`` chars."""
        value = self.string(key)
        if value is None:
            return None
        if len(value) > limit:
            raise invalid(
                key, f"is {len(value)} characters long; at most {limit}", ErrorCode.TEXT_TOO_LONG
            )
        try:
            check_text(value, key)
        except ProtocolError as err:
            raise ApiError(400, err.message, param=key, code=err.code) from None
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        """An object of at most ``OPTIONS_MAX`` entries (absent: empty)."""
        value = self.body.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise invalid(key, f"must be an object, got {_kind(value)}")
        if len(value) > OPTIONS_MAX:
            raise invalid(key, f"has {len(value)} entries; at most {OPTIONS_MAX}")
        return dict(value)

    def boolean(self, key: str) -> bool | None:
        value = self.body.get(key)
        if value is not None and not isinstance(value, bool):
            raise invalid(key, f"must be true or false, got {_kind(value)}")
        return value

    def number(self, key: str, low: float, high: float) -> float | None:
        value = self.body.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise invalid(key, f"must be a number from {low} to {high}, got {_kind(value)}")
        if not (math.isfinite(value) and low <= value <= high):
            raise invalid(key, f"must be from {low} to {high}, got {value}")
        return float(value)

    def integer(self, key: str, low: int, high: int) -> int | None:
        value = self.body.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(key, f"must be an integer, got {_kind(value)}")
        if not low <= value <= high:
            raise invalid(key, f"must be from {low} to {high}, got {value}")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.string(key)
        if value is None:
            return default
        for option in allowed:
            if value.lower() == option.lower():
                return option
        raise invalid(
            key,
            f"{value!r} is not supported; allowed: {', '.join(allowed)}",
            ErrorCode.UNSUPPORTED_VALUE,
        )


def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", bool: "a boolean", str: "a string"}.get(
        type(value), type(value).__name__
    )


def normalize_aliases(body: Mapping[str, Any]) -> dict[str, Any]:
    """vllm-omni's ``speaker`` is ``voice``; OpenAI's ``{"id": ...}`` voice is its id."""
    out = dict(body)
    speaker = out.pop("speaker", None)
    if out.get("voice") is None and speaker is not None:
        out["voice"] = speaker
    voice = out.get("voice")
    if isinstance(voice, dict):
        if not isinstance(voice.get("id"), str):
            raise invalid("voice", "a voice object must have a string 'id'")
        out["voice"] = voice["id"]
    return out


def parse_speech_request(
    rt: Runtime,
    body: Mapping[str, Any],
    default_format: str = DEFAULT_RESPONSE_FORMAT,
    *,
    whole_file: bool = False,
) -> SpeechRequest:
    """Validate one request body; raises ApiError naming the field and what is allowed.
    ``whole_file``: the answer is one whole file (batch items), whatever ``stream`` says."""
    fields = _Fields(normalize_aliases(body))
    caps = rt.model.capabilities
    limit = rt.server.limits.max_text_chars

    text = fields.text("input", limit)
    if text is None:
        raise ApiError(400, "input: required", param="input", code=ErrorCode.MISSING_FIELD)
    if not text.strip():
        raise invalid("input", "must contain text to speak, got an empty string")
    instructions = fields.text("instructions", INSTRUCTIONS_MAX_LEN)

    response_format = fields.choice("response_format", RESPONSE_FORMATS, default_format)
    stream = fields.boolean("stream")
    stream_format = fields.choice("stream_format", STREAM_FORMATS, "sse" if stream else "audio")
    if stream is False and stream_format == "sse":
        raise invalid(
            "stream",
            "false asks for one whole file, stream_format sse for a stream of events;"
            " drop one of them",
        )
    whole_file = whole_file or stream is False
    rates = SAMPLE_RATES[response_format]
    sample_rate = fields.integer("sample_rate", 1, 1 << 30)
    if sample_rate is None:
        sample_rate = DEFAULT_SAMPLE_RATE
    elif sample_rate not in rates:
        raise invalid(
            "sample_rate",
            f"{sample_rate} Hz is not offered for {response_format}; allowed: "
            + ", ".join(str(r) for r in rates),
            ErrorCode.UNSUPPORTED_VALUE,
        )
    # Every model honours it: natively, or by the server's time-stretch.
    speed = fields.number("speed", SPEED_MIN, SPEED_MAX)
    speed = 1.0 if speed is None else speed
    if fields.boolean("word_timestamps"):
        raise invalid(
            "word_timestamps",
            "not offered over HTTP; use the WebSocket /v1/audio/speech/ws with timestamps: word",
            ErrorCode.UNSUPPORTED_VALUE,
        )

    model = fields.string("model")
    if is_openai_model(model):
        model = None  # OpenAI's model names mean the served model here
    voice = fields.string("voice")
    if voice is not None:
        names = [v.name for v in caps.voices]
        by_key = {name.lower(): name for name in names}
        voice = voice if voice in names else by_key.get(voice.lower(), voice)
        voice = openai_voice(voice, tuple(names), dict(rt.model_config.openai_voices))
    task_type = None
    if fields.present("task_type"):
        task_type = fields.choice("task_type", TASK_TYPES, "")
    options, extra = _model_options(fields)
    warnings: list[str] = []
    try:
        params = resolve_params(
            rt,
            model=model,
            voice=voice,
            language=fields.string("language"),
            speed=speed,
            instructions=instructions,
            options=options,
            extra=extra,
            task_type=task_type,
            warnings=warnings,
        )
    except ModelInputError as err:
        raise from_model_error(err) from None
    return SpeechRequest(
        text, params, response_format, sample_rate, stream_format, whole_file, tuple(warnings)
    )


def takes_ref_audio(rt: Runtime) -> bool:
    return any(f.name == "ref_audio" for f in rt.model.capabilities.request_fields)


async def load_ref_audio(
    rt: Runtime, body: Mapping[str, Any], client: ClientId | None = None
) -> Mapping[str, Any]:
    """``body`` with a ``ref_audio`` path, ``file://`` URI or URL replaced by the
    file's bytes (within ``ServerConfig.media``, counted against ``client``'s
    reference-audio jobs); models that take no reference audio never cause a read.
    A ``ref_audio`` of no usable shape is a 400 naming it."""
    value = body.get("ref_audio")
    try:
        data = await rt.media.load(value, client, takes_ref_audio(rt))
    except ModelInputError as err:
        raise from_model_error(err) from None
    return body if data is value else {**body, "ref_audio": data}


def _model_options(fields: _Fields) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request's model options: ``options`` (each must be one of the model's),
    and ``extra_params`` with the top-level names over it (ignored where the model
    does not take them). ``voiceserver.params`` checks their types and ranges
    against the served model's own fields, as on every endpoint."""
    options = fields.mapping("options")
    extra = fields.mapping("extra_params")
    extra.update({key: fields.body[key] for key in WIRE_FIELDS if fields.present(key)})
    if fields.present("initial_codec_chunk_frames"):  # accepted; chunk sizes are ours
        fields.integer("initial_codec_chunk_frames", 0, INT64[1])
    return options, extra
