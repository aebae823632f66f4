"""Messages of Cartesia's TTS API (``/tts/websocket``, ``/tts/bytes``, ``/tts/sse``).

Shapes as Cartesia documents them for API versions 2024-11-13 to 2026-03-01 (the
``cartesia_version`` query and ``Cartesia-Version`` header are accepted and ignored)
and as its official clients send and parse them: the ``cartesia`` SDK 4.x, LiveKit's
``livekit-plugins-cartesia`` and Pipecat's ``CartesiaTTSService`` /
``CartesiaHttpTTSService``.

Client -> server (one JSON object per text frame, no ``type`` field):

- a generation request: ``context_id``, ``model_id``, ``transcript``, ``voice``
  (``"<id>"``, ``{"mode": "id", "id"}`` or ``{"id"}``; ``{"mode": "embedding"}`` is
  refused here), ``output_format`` (``{container: raw, encoding, sample_rate}``),
  ``continue`` (more input follows; default false), ``flush``, ``language``,
  ``add_timestamps``, ``add_phoneme_timestamps``, ``use_normalized_timestamps``,
  ``max_buffer_delay_ms``, ``generation_config`` (``{speed, volume, emotion}``),
  ``speed`` (``slow``/``normal``/``fast``, or an older number), ``pronunciation_dict_id``,
  ``duration``. Unknown fields are ignored.
- a cancel: ``{"context_id", "cancel": true}``.

Server -> client: ``chunk`` (base64 ``data``), ``timestamps`` (``word_timestamps``:
``{words, start, end}`` in seconds), ``flush_done``, ``done`` and ``error``, each with
``context_id``, ``status_code`` and ``done``. An ``error`` carries both the structured
fields of 2026-03-01 (``title``, ``message``, ``error_code``, ``request_id``) and the
older single ``error`` string. Nothing here touches a socket.
"""

from __future__ import annotations

import math
import uuid
from typing import Annotated, Any, Literal, Protocol, get_args

import msgspec
from msgspec import Meta

from protocol.codec import decode_tagged, encode_message
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import NAME_MAX_LEN, SPEED_MAX, SPEED_MIN

RawEncoding = Literal["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw"]
FileContainer = Literal["raw", "wav", "mp3"]
CartesiaRate = Literal[8000, 16000, 22050, 24000, 44100, 48000]
Mp3BitRate = Literal[32000, 64000, 96000, 128000, 192000]
VoiceMode = Literal["id", "embedding"]
NamedSpeed = Literal["slowest", "slow", "normal", "fast", "fastest"]

RAW_ENCODINGS: tuple[str, ...] = get_args(RawEncoding)
CONTAINERS: tuple[str, ...] = get_args(FileContainer)
SAMPLE_RATES: tuple[int, ...] = get_args(CartesiaRate)
MP3_BIT_RATES: tuple[int, ...] = get_args(Mp3BitRate)
DEFAULT_MP3_BIT_RATE = 128000

CONTEXT_ID_MAX_LEN = 128
MAX_BUFFER_DELAY_MS = 5000
"""Cartesia's range for ``max_buffer_delay_ms`` is 0..5000."""

NAMED_SPEEDS: dict[str, float] = {
    "slowest": 0.6,
    "slow": 0.8,
    "normal": 1.0,
    "fast": 1.25,
    "fastest": 1.5,
}
"""Cartesia's named speeds (``speed``, and the older ``__experimental_controls``) as
speed factors."""

_ALLOWED: dict[str, tuple[object, ...]] = {
    "encoding": RAW_ENCODINGS,
    "container": CONTAINERS,
    "sample_rate": SAMPLE_RATES,
    "bit_rate": MP3_BIT_RATES,
    "mode": get_args(VoiceMode),
    "speed": tuple(NAMED_SPEEDS),
}

ContextId = Annotated[str, Meta(min_length=1, max_length=CONTEXT_ID_MAX_LEN)]
Name = Annotated[str, Meta(max_length=NAME_MAX_LEN)]
SpeedValue = NamedSpeed | float


# --- client -> server ---------------------------------------------------------------


class VoiceControls(msgspec.Struct, kw_only=True, frozen=True):
    """The 2024-11-13 API's ``voice.__experimental_controls``."""

    speed: SpeedValue | None = None
    emotion: list[Annotated[str, Meta(max_length=NAME_MAX_LEN)]] | None = None


class VoiceSpec(msgspec.Struct, kw_only=True, frozen=True):
    """``voice`` as an object: ``{"mode": "id", "id"}``, ``{"id"}`` (2026-03-01) or
    ``{"mode": "embedding", "embedding"}`` (refused: no model here takes Cartesia's
    embeddings)."""

    mode: VoiceMode | None = None
    id: Name | None = None
    embedding: Annotated[list[float], Meta(max_length=8192)] | None = None
    experimental_controls: VoiceControls | None = msgspec.field(
        default=None, name="__experimental_controls"
    )


class OutputFormatSpec(msgspec.Struct, kw_only=True, frozen=True):
    """``output_format``: raw (the sockets and SSE), wav or mp3 (``/tts/bytes``)."""

    container: FileContainer = "raw"
    encoding: RawEncoding | None = None
    sample_rate: CartesiaRate | None = None
    bit_rate: Mp3BitRate | None = None


class GenerationConfig(msgspec.Struct, kw_only=True, frozen=True):
    """sonic-3's ``generation_config``: ``speed`` is honoured, the rest has no equivalent."""

    speed: float | None = None
    volume: float | None = None
    emotion: Name | None = None


class CartesiaRequest(msgspec.Struct, kw_only=True, frozen=True):
    """One client message of the socket (a generation request or a cancel), or the body of
    an HTTP request. Every field is optional here; what each use requires is checked by
    that use, so an error names the missing field."""

    context_id: ContextId | None = None
    cancel: bool = False
    model_id: Name | None = None
    transcript: str | None = None
    voice: Name | VoiceSpec | None = None
    output_format: OutputFormatSpec | None = None
    continue_: bool = msgspec.field(default=False, name="continue")
    flush: bool = False
    language: Name | None = None
    locale: Name | None = None
    add_timestamps: bool = False
    add_phoneme_timestamps: bool = False
    use_normalized_timestamps: bool = False
    max_buffer_delay_ms: Annotated[int, Meta(ge=0, le=MAX_BUFFER_DELAY_MS)] | None = None
    generation_config: GenerationConfig | None = None
    speed: SpeedValue | None = None
    pronunciation_dict_id: Name | None = None
    duration: float | None = None


_request_decoder = msgspec.json.Decoder(CartesiaRequest)


def decode_request(data: str | bytes) -> CartesiaRequest:
    """One client message or HTTP body; raises ProtocolError naming the field."""
    return decode_tagged(_request_decoder, data, (), _ALLOWED)


def convert_request(body: dict[str, Any]) -> CartesiaRequest:
    """An HTTP body already parsed as JSON; raises ProtocolError naming the field."""
    return decode_request(msgspec.json.encode(body))


# --- server -> client ---------------------------------------------------------------


class _Server(msgspec.Struct, tag_field="type", kw_only=True, frozen=True):
    pass


class Chunk(_Server, tag="chunk", omit_defaults=True):
    data: str
    """Base64 audio."""
    done: bool
    status_code: int
    step_time: float
    context_id: str
    flush_id: int | None = None


class WordTimestamps(msgspec.Struct, kw_only=True, frozen=True):
    words: list[str]
    start: list[float]
    end: list[float]
    """Seconds from the context's first sample."""


class TimestampsMessage(_Server, tag="timestamps", omit_defaults=True):
    word_timestamps: WordTimestamps
    done: bool
    status_code: int
    context_id: str
    flush_id: int | None = None


class FlushDone(_Server, tag="flush_done"):
    flush_id: int
    context_id: str
    done: bool = False
    flush_done: bool = True
    status_code: int = 206


class Done(_Server, tag="done"):
    context_id: str
    done: bool = True
    status_code: int = 206


class ErrorEvent(_Server, tag="error"):
    """``context_id`` is always present (null when the error names no context): Pipecat
    reads it unconditionally."""

    context_id: str | None
    status_code: int
    title: str
    message: str
    error_code: str
    request_id: str
    error: str
    """The pre-2026 single-string form, ``"<title>: <message>"``."""
    done: bool = True


ServerMessage = Chunk | TimestampsMessage | FlushDone | Done | ErrorEvent
_server_decoder = msgspec.json.Decoder(ServerMessage)


def encode_server(msg: ServerMessage) -> str:
    return encode_message(msg)


def decode_server(data: str | bytes) -> ServerMessage:
    """A server message (for tests and clients); raises ProtocolError."""
    return decode_tagged(_server_decoder, data, ("chunk", "timestamps", "flush_done", "done"))


# --- errors -------------------------------------------------------------------------

_STATUS: dict[str, int] = {
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.TOO_MANY_CONTEXTS: 429,
    ErrorCode.OVERLOADED: 503,
    ErrorCode.SERVER_SHUTDOWN: 503,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.MESSAGE_TOO_BIG: 413,
    ErrorCode.IDLE_TIMEOUT: 408,
    ErrorCode.SLOW_READER: 408,
    ErrorCode.TOKEN_EXPIRED: 401,
}
_TITLES: dict[str, str] = {
    ErrorCode.INVALID_JSON: "Invalid JSON",
    ErrorCode.MISSING_FIELD: "Missing field",
    ErrorCode.INVALID_FIELD: "Invalid field",
    ErrorCode.UNSUPPORTED_VALUE: "Unsupported value",
    ErrorCode.UNKNOWN_VOICE: "Invalid voice",
    ErrorCode.UNKNOWN_MODEL: "Invalid model",
    ErrorCode.UNSUPPORTED_LANGUAGE: "Invalid language",
    ErrorCode.TEXT_TOO_LONG: "Transcript too long",
    ErrorCode.CONTEXT_CLOSED: "Context has closed",
    ErrorCode.TOO_MANY_CONTEXTS: "Too many concurrent contexts",
    ErrorCode.RATE_LIMITED: "Too many requests",
    ErrorCode.OVERLOADED: "Server overloaded",
    ErrorCode.INTERNAL_ERROR: "Internal error",
}


def status_of(code: str) -> int:
    """The HTTP-like status Cartesia's errors carry, for one of our error codes."""
    return _STATUS.get(code, 400)


def title_of(code: str) -> str:
    return _TITLES.get(code, code.replace("_", " ").capitalize())


def error_event(err: ProtocolError, request_id: str) -> ErrorEvent:
    """The socket's (and SSE's) ``error`` for ``err``."""
    code = str(err.code)
    title = title_of(code)
    return ErrorEvent(
        context_id=err.context_id,
        status_code=status_of(code),
        title=title,
        message=err.message,
        error_code=code,
        request_id=request_id,
        error=f"{title}: {err.message}",
    )


def http_error_body(code: str, message: str, request_id: str) -> dict[str, str]:
    """The JSON body of an HTTP error (Cartesia-Version 2026-03-01's error object)."""
    return {
        "error_code": code,
        "title": title_of(code),
        "message": message,
        "request_id": request_id,
    }


# --- what the fields mean here ----------------------------------------------------------


def served_model(model_id: str | None) -> str | None:
    """The model a request names for our resolver: Cartesia's model ids (``sonic``,
    ``sonic-2``, ``sonic-3``, ``sonic-turbo``, ``sonic-latest``, dated ones...) mean the
    served model (None); any other name is passed on and must be one of the served
    model's names."""
    if model_id is None or model_id.strip().lower().startswith("sonic"):
        return None
    return model_id


def speed_factor(value: SpeedValue | None, param: str, *, scale: bool = False) -> float | None:
    """A speed factor from Cartesia's named speeds or numbers; None when not given.

    ``scale``: the 2024 API's numbers (``speed``, ``__experimental_controls.speed``), -1..1
    with 0 normal, map to 0.5..1.5; otherwise a number is a factor (sonic-3's
    ``generation_config.speed``), within ``SPEED_MIN``..``SPEED_MAX`` here."""
    if value is None:
        return None
    if isinstance(value, str):
        return NAMED_SPEEDS[value]
    low, high = (-1.0, 1.0) if scale else (SPEED_MIN, SPEED_MAX)
    if not math.isfinite(value) or not low <= value <= high:
        raise ProtocolError(
            ErrorCode.INVALID_FIELD,
            f"`{param}`: {value!r} is out of range; allowed: {low:g} to {high:g}"
            + (" (0 is normal)" if scale else " (a speed factor, 1.0 is normal)")
            + " or one of "
            + ", ".join(repr(s) for s in NAMED_SPEEDS),
            param=param,
        )
    return 1.0 + value / 2 if scale else value


def requested_speed(request: CartesiaRequest) -> float | None:
    """The speed a request asks for: ``generation_config.speed`` first, then
    ``voice.__experimental_controls.speed``, then ``speed``."""
    config = request.generation_config
    if config is not None and config.speed is not None:
        return speed_factor(config.speed, "generation_config.speed")
    voice = request.voice
    controls = voice.experimental_controls if isinstance(voice, VoiceSpec) else None
    if controls is not None and controls.speed is not None:
        return speed_factor(controls.speed, "voice.__experimental_controls.speed", scale=True)
    return speed_factor(request.speed, "speed", scale=True)


def ignored_fields(request: CartesiaRequest) -> list[str]:
    """The fields a request set that have no equivalent here (they are ignored)."""
    ignored = [
        name
        for name in ("add_phoneme_timestamps", "use_normalized_timestamps")
        if getattr(request, name)
    ]
    ignored += [
        name for name in ("pronunciation_dict_id", "duration") if getattr(request, name) is not None
    ]
    config = request.generation_config
    if config is not None:
        ignored += [
            f"generation_config.{name}"
            for name in ("volume", "emotion")
            if getattr(config, name) is not None
        ]
    voice = request.voice
    controls = voice.experimental_controls if isinstance(voice, VoiceSpec) else None
    if controls is not None and controls.emotion:
        ignored.append("voice.__experimental_controls.emotion")
    return ignored


VOICE_NAMESPACE = uuid.NAMESPACE_URL
VOICE_PREFIX = "voiceserver:voice:"


def voice_uuid(name: str) -> str:
    """The stable UUID a voice of ours answers to: ``uuid5(NAMESPACE_URL,
    "voiceserver:voice:" + name.lower())`` (names compare without case)."""
    return str(uuid.uuid5(VOICE_NAMESPACE, VOICE_PREFIX + name.lower()))


class VoiceBook(Protocol):
    """How a Cartesia voice id becomes one of the served voices (the server supplies it)."""

    def name_of(self, voice_id: str) -> str | None:
        """Our voice name for ``voice_id`` (a name in any case, or its UUID), or None."""
        ...

    def listing(self) -> str:
        """The voices, for an error message: ``name (id <uuid>)``, ..."""
        ...


def voice_id(request: CartesiaRequest) -> str:
    """The id of the voice a request names; ProtocolError when it names none or an
    embedding."""
    voice = request.voice
    if voice is None:
        raise ProtocolError(
            ErrorCode.MISSING_FIELD,
            'missing required field `voice`: send {"mode": "id", "id": "<voice id>"}'
            " with an id from GET /voices",
            param="voice",
        )
    if isinstance(voice, str):
        return voice
    if voice.mode == "embedding" or (voice.id is None and voice.embedding is not None):
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VALUE,
            "`voice.mode`: 'embedding' is not supported by this server (no model here takes"
            " Cartesia's voice embeddings); allowed: 'id', with an id from GET /voices",
            param="voice.mode",
        )
    if voice.id is None:
        raise ProtocolError(
            ErrorCode.MISSING_FIELD, "missing required field `voice.id`", param="voice.id"
        )
    return voice.id


def lookup_voice(book: VoiceBook | None, request: CartesiaRequest) -> str:
    """Our voice name for the request's voice (unchanged without a book); ProtocolError
    ``unknown_voice`` listing the voices when the book does not know it."""
    wanted = voice_id(request)
    if book is None:
        return wanted
    name = book.name_of(wanted)
    if name is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_VOICE,
            f"`voice.id`: unknown voice {wanted[:80]!r}; this server's voices: {book.listing()}"
            " (GET /voices lists them)",
            param="voice.id",
        )
    return name
