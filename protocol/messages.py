"""Every message of wire protocol v1 (docs/protocol.md), as msgspec Structs.

Client and server messages are two tagged unions keyed by the ``type`` field
(:data:`ClientMessage`, :data:`ServerMessage`); the tag of each Struct is its wire
type string. Conventions:

- All Structs are frozen and keyword-only. Optional fields default to ``None``
  (``text.append``'s ``flush`` defaults to ``False``).
- Unknown extra fields are ignored on decode (forward compatible); wrong types fail.
- Top-level messages are encoded with ``omit_defaults``: an unset optional field is
  left out of the JSON. The nested settings objects (:class:`OutputFormat`,
  :class:`BufferConfig`, :class:`SessionSettings`, :class:`Limits`) are always encoded
  in full, so ``session.created``/``session.updated`` show every effective value.
- An ``output_format`` sent by a client replaces the whole output format (fields it
  leaves out take their defaults); it is not merged field by field.
- Every client message may carry ``event_id``; an ``error`` caused by it echoes it.
- Model options (``options`` and the top-level :data:`OPTION_FIELDS`) are carried
  without types or ranges: those are the served model's, listed in
  ``session.created`` (:class:`OptionField`) and checked by the server
  (:mod:`protocol.options`).

Value sets (encodings, sample rates, ...) are ``Literal`` types here; checks that
span fields (Opus sample rates, Ogg needs Opus) live in :mod:`protocol.validation`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

PROTOCOL_VERSION = 1

Encoding = Literal["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw", "opus"]
# The union of the PCM and the Opus rates; validation.check_output_format applies
# the per-encoding set.
SampleRate = Literal[8000, 12000, 16000, 22050, 24000, 44100, 48000]
Container = Literal["raw", "ogg"]
FrameMs = Literal[10, 20, 40, 60]
AudioTransport = Literal["binary", "base64"]
TimestampMode = Literal["none", "word"]
BufferMode = Literal["auto", "manual"]

ENCODINGS: tuple[str, ...] = get_args(Encoding)
PCM_SAMPLE_RATES: tuple[int, ...] = (8000, 16000, 22050, 24000, 44100, 48000)
OPUS_SAMPLE_RATES: tuple[int, ...] = (8000, 12000, 16000, 24000, 48000)
CONTAINERS: tuple[str, ...] = get_args(Container)
FRAME_MS_VALUES: tuple[int, ...] = get_args(FrameMs)
AUDIO_TRANSPORTS: tuple[str, ...] = get_args(AudioTransport)
TIMESTAMP_MODES: tuple[str, ...] = get_args(TimestampMode)
BUFFER_MODES: tuple[str, ...] = get_args(BufferMode)

SPEED_MIN = 0.25
SPEED_MAX = 4.0
CONTEXT_ID_MAX_LEN = 128
CONTEXT_ID_PATTERN = r"^[A-Za-z0-9_.:-]+\Z"  # \Z: "$" would let a final "\n" in
ID_MAX_LEN = 256
"""Longest ``event_id`` / ``flush_id`` (they are echoed back)."""
NAME_MAX_LEN = 256
"""Longest ``model``, ``voice`` or ``language`` name."""
INSTRUCTIONS_MAX_LEN = 10_000
"""Longest ``instructions``."""
REF_TEXT_MAX_LEN = 10_000
"""Longest ``ref_text`` (the reference audio's transcript), on every endpoint: the
sockets, HTTP speech and batch, and voice uploads (a minute of speech is ~1,000)."""
SPEAKER_EMBEDDING_MAX_LEN = 8192
MAX_DELAY_MS_MAX = 600_000
IDLE_TIMEOUT_MIN_S = 0.1

ContextId = Annotated[
    str, Meta(min_length=1, max_length=CONTEXT_ID_MAX_LEN, pattern=CONTEXT_ID_PATTERN)
]
Speed = Annotated[float, Meta(ge=SPEED_MIN, le=SPEED_MAX)]
INT64_MAX = 2**63 - 1
NonNegativeInt = Annotated[int, Meta(ge=0, le=INT64_MAX)]
IdleSeconds = Annotated[float, Meta(ge=IDLE_TIMEOUT_MIN_S)]
EventId = Annotated[str, Meta(max_length=ID_MAX_LEN)]
Name = Annotated[str, Meta(max_length=NAME_MAX_LEN)]
LongText = Annotated[str, Meta(max_length=INSTRUCTIONS_MAX_LEN)]
RefText = Annotated[str, Meta(max_length=REF_TEXT_MAX_LEN)]
Embedding = Annotated[list[float], Meta(max_length=SPEAKER_EMBEDDING_MAX_LEN)]
DelayMs = Annotated[int, Meta(ge=0, le=MAX_DELAY_MS_MAX)]
Bitrate = Annotated[int, Meta(ge=6000, le=510000)]

# Model options (extension, docs/protocol-extensions.md). Their names, types, ranges
# and defaults are the served model's (listed in ``session.created``); the protocol
# only carries them, bounded in size, and the server checks them against the model.
OPTIONS_MAX = 64
"""Most entries in one ``options`` object."""
OptionName = Annotated[str, Meta(min_length=1, max_length=64)]
Options = Annotated[dict[OptionName, Any], Meta(max_length=OPTIONS_MAX)]
"""An open map of model options: ``{name: value}``; a null value unsets the name."""
OPTION_FIELDS: tuple[str, ...] = (
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "seed",
    "max_new_tokens",
    "streaming_text",
)
"""Model options that ``session.update`` and ``context.create`` also take as top-level
fields (their first spelling, kept for the clients that send them); each is an entry
of ``options`` under the same name."""
OptionType = Literal["number", "integer", "boolean", "string", "numbers", "audio"]


# --- nested objects -------------------------------------------------------------


class OutputFormat(msgspec.Struct, kw_only=True, frozen=True):
    """Audio format of a session or context. ``frame_ms`` None: the server's default."""

    encoding: Encoding = "pcm_s16le"
    sample_rate: SampleRate = 24000
    container: Container = "raw"
    bitrate: Bitrate | None = None
    frame_ms: FrameMs | None = None


class BufferConfig(msgspec.Struct, kw_only=True, frozen=True):
    """How a context buffers text before synthesis (``auto``: the server segments)."""

    mode: BufferMode = "auto"
    max_delay_ms: DelayMs | None = None
    """auto mode: cut a stalled stream at a word boundary after this long; 0 cuts
    at every word boundary as soon as it arrives."""


class Limits(msgspec.Struct, kw_only=True, frozen=True):
    """Per-session limits the server enforces; sent in ``session.created``."""

    max_contexts: int = 8
    max_text_chars: int = 100_000
    idle_timeout_s: float = 60.0
    max_message_bytes: int = 4 * 1024 * 1024


class OptionField(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One option the served model takes (``option_fields`` of ``session.created``).

    ``type``: ``number``, ``integer``, ``boolean``, ``string``, ``numbers`` (an array of
    numbers) or ``audio`` (sent as ``ref_audio``, never in ``options``). The bounds are
    inclusive unless ``exclusive_minimum``; unset fields are left out.
    """

    name: str
    type: OptionType
    minimum: int | float | None = None
    maximum: int | float | None = None
    exclusive_minimum: bool = False
    default: Any = None
    doc: str = ""


class SessionSettings(msgspec.Struct, kw_only=True, frozen=True):
    """The effective session settings (``session`` of session.created/updated).

    ``model``/``voice``/``language`` None: the server's default for that field.
    """

    model: str | None = None
    voice: str | None = None
    language: str | None = None
    speed: float = 1.0
    instructions: str | None = None
    output_format: OutputFormat = msgspec.field(default_factory=OutputFormat)
    audio_transport: AudioTransport = "binary"
    timestamps: TimestampMode = "none"
    idle_timeout_s: float | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    """The model options in effect: every one set and not unset since."""
    # The top-level spellings of OPTION_FIELDS: each shows its entry of ``options``.
    temperature: Any = None
    top_k: Any = None
    top_p: Any = None
    repetition_penalty: Any = None
    seed: Any = None
    max_new_tokens: Any = None
    streaming_text: Any = None


class ContextSettings(msgspec.Struct, kw_only=True, frozen=True):
    """The effective settings of one context: the session's, overridden by context.create."""

    model: str | None = None
    voice: str | None = None
    language: str | None = None
    speed: float = 1.0
    instructions: str | None = None
    output_format: OutputFormat = msgspec.field(default_factory=OutputFormat)
    audio_transport: AudioTransport = "binary"
    timestamps: TimestampMode = "none"
    ref_audio: str | None = None
    ref_text: str | None = None
    speaker_embedding: list[float] | None = None
    buffer: BufferConfig = msgspec.field(default_factory=BufferConfig)
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    """The session's options, updated by the context's own (top-level spellings included)."""


class WordTimestamp(msgspec.Struct, kw_only=True, frozen=True):
    """One word: times relative to the context's first sample; chars index the context text."""

    text: str
    start_ms: int
    end_ms: int
    char_start: int
    char_end: int


class Usage(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """What a context consumed: input characters and, where known, model frames."""

    chars: int
    frames: int | None = None


# --- client -> server -------------------------------------------------------------


class _ClientMessage(
    msgspec.Struct, tag_field="type", kw_only=True, frozen=True, omit_defaults=True
):
    event_id: EventId | None = None


class SessionUpdate(_ClientMessage, tag="session.update"):
    model: Name | None = None
    voice: Name | None = None
    language: Name | None = None
    speed: Speed | None = None
    instructions: LongText | None = None
    output_format: OutputFormat | None = None
    audio_transport: AudioTransport | None = None
    timestamps: TimestampMode | None = None
    idle_timeout_s: IdleSeconds | None = None
    options: Options | None = None
    temperature: Any = None
    top_k: Any = None
    top_p: Any = None
    repetition_penalty: Any = None
    seed: Any = None
    max_new_tokens: Any = None
    streaming_text: Any = None


class ContextCreate(_ClientMessage, tag="context.create"):
    context_id: ContextId
    voice: Name | None = None
    language: Name | None = None
    speed: Speed | None = None
    instructions: LongText | None = None
    output_format: OutputFormat | None = None
    ref_audio: str | None = None
    ref_text: RefText | None = None
    speaker_embedding: Embedding | None = None
    buffer: BufferConfig | None = None
    timestamps: TimestampMode | None = None
    options: Options | None = None
    temperature: Any = None
    top_k: Any = None
    top_p: Any = None
    repetition_penalty: Any = None
    seed: Any = None
    max_new_tokens: Any = None
    streaming_text: Any = None


class TextAppend(_ClientMessage, tag="text.append"):
    context_id: ContextId
    text: str
    flush: bool = False


class ContextFlush(_ClientMessage, tag="context.flush"):
    context_id: ContextId
    flush_id: EventId | None = None


class ContextEnd(_ClientMessage, tag="context.end"):
    context_id: ContextId


class ContextCancel(_ClientMessage, tag="context.cancel"):
    context_id: ContextId
    played_ms: NonNegativeInt | None = None


class Keepalive(_ClientMessage, tag="keepalive"):
    pass


class SessionClose(_ClientMessage, tag="session.close"):
    pass


ClientMessage = (
    SessionUpdate
    | ContextCreate
    | TextAppend
    | ContextFlush
    | ContextEnd
    | ContextCancel
    | Keepalive
    | SessionClose
)
CLIENT_MESSAGE_TYPES: tuple[type[_ClientMessage], ...] = get_args(ClientMessage)


# --- server -> client -------------------------------------------------------------


class _ServerMessage(
    msgspec.Struct, tag_field="type", kw_only=True, frozen=True, omit_defaults=True
):
    pass


class SessionCreated(_ServerMessage, tag="session.created", omit_defaults=False):
    session_id: str
    protocol_version: int
    session: SessionSettings
    limits: Limits
    option_fields: list[OptionField] = msgspec.field(default_factory=list)
    """The options the served model takes (a server that predates them sends none)."""


class SessionUpdated(_ServerMessage, tag="session.updated"):
    session: SessionSettings
    event_id: str | None = None


class ContextCreated(_ServerMessage, tag="context.created"):
    context_id: str
    stream: int


class AudioMessage(_ServerMessage, tag="audio"):
    """Audio as base64 JSON (``audio_transport: base64``); ``audio`` is base64 on the wire."""

    context_id: str
    seq: int
    audio: bytes


class Timestamps(_ServerMessage, tag="timestamps"):
    context_id: str
    words: list[WordTimestamp]


class ContextFlushed(_ServerMessage, tag="context.flushed"):
    context_id: str
    audio_ms: int
    flush_id: str | None = None


class ContextDone(_ServerMessage, tag="context.done"):
    context_id: str
    audio_ms: int
    usage: Usage


class ContextCancelled(_ServerMessage, tag="context.cancelled"):
    """``last_seq`` is the seq of the last frame sent for the context, null if none was."""

    context_id: str
    audio_sent_ms: int
    last_seq: int | None


class WarningMessage(_ServerMessage, tag="warning"):
    code: str
    message: str
    context_id: str | None = None


class ErrorMessage(_ServerMessage, tag="error"):
    code: str
    message: str
    fatal: bool
    param: str | None = None
    event_id: str | None = None
    context_id: str | None = None


ServerMessage = (
    SessionCreated
    | SessionUpdated
    | ContextCreated
    | AudioMessage
    | Timestamps
    | ContextFlushed
    | ContextDone
    | ContextCancelled
    | WarningMessage
    | ErrorMessage
)
SERVER_MESSAGE_TYPES: tuple[type[_ServerMessage], ...] = get_args(ServerMessage)
