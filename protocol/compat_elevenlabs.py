"""Messages of ElevenLabs' text-to-speech API (WebSockets and HTTP), as msgspec Structs.

Looked up in the ``elevenlabs`` Python SDK 2.78 (``types/*.py``, ``text_to_speech/
raw_client.py``, ``voices/raw_client.py``), ElevenLabs' AsyncAPI document
(``elevenlabs/elevenlabs-docs``, ``fern/apis/api/asyncapi.yml``) and what the official
integrations send and read (``livekit-plugins-elevenlabs`` 1.8.9, Pipecat 1.14
``ElevenLabsTTSService`` / ``ElevenLabsHttpTTSService``). docs/elevenlabs.md says what
each field does on this server.

Client -> server on ``/v1/text-to-speech/{voice_id}/stream-input`` (one context per
socket) and ``.../multi-stream-input`` (many, named by ``context_id``): one JSON object
per message, every field optional (:class:`StreamInput`): ``text``, ``flush``,
``try_trigger_generation``, ``voice_settings``, ``generation_config``,
``pronunciation_dictionary_locators``, ``xi_api_key`` / ``xi-api-key``,
``authorization``; the multi-context socket also takes ``context_id`` (or
``contextId``), ``close_context`` and ``close_socket``. A field not listed is refused,
naming it.

Server -> client: :class:`AudioOutput` (``audio`` base64, ``alignment`` and
``normalizedAlignment`` with ``chars``/``charStartTimesMs``/``charDurationsMs``),
:class:`FinalOutput` (``isFinal: true``) and :class:`ErrorOutput` (``message``,
``error``, and ``code`` when the socket closes), each with ``contextId`` on the
multi-context socket.

HTTP: :class:`SpeechBody` is the body of ``POST /v1/text-to-speech/{voice_id}`` and its
``/stream``, ``/with-timestamps`` and ``/stream/with-timestamps`` variants; the
timestamped answers are :class:`AudioWithTimestamps` (whole, or one per line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from protocol.codec import SHOWN_MAX, decode_tagged, encode_message, shown
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import ID_MAX_LEN, REF_TEXT_MAX_LEN, SPEED_MAX, SPEED_MIN
from protocol.validation import check_text

# --- output formats ---------------------------------------------------------------

Codec = Literal["pcm", "ulaw", "alaw", "mp3", "opus", "wav"]


@dataclass(frozen=True, slots=True)
class FormatSpec:
    """One ``output_format`` name: ``codec_samplerate[_kbps]``."""

    name: str
    codec: Codec
    sample_rate: int
    kbps: int | None = None
    """Bit rate of mp3 and Opus, in kbit/s."""

    @property
    def bytes_per_sample(self) -> int | None:
        """Bytes per sample of the sample-by-sample codecs (None: compressed)."""
        return {"pcm": 2, "wav": 2, "ulaw": 1, "alaw": 1}.get(self.codec)


def _formats(socket: bool) -> dict[str, FormatSpec]:
    specs: list[FormatSpec] = [
        *(FormatSpec(f"pcm_{r}", "pcm", r) for r in (8000, 16000, 22050, 24000, 32000, 44100)),
        FormatSpec("pcm_48000", "pcm", 48000),
        FormatSpec("ulaw_8000", "ulaw", 8000),
        FormatSpec("alaw_8000", "alaw", 8000),
        FormatSpec("mp3_22050_32", "mp3", 22050, 32),
        FormatSpec("mp3_24000_48", "mp3", 24000, 48),
        FormatSpec("mp3_44100", "mp3", 44100, 128),
        *(FormatSpec(f"mp3_44100_{k}", "mp3", 44100, k) for k in (32, 64, 96, 128, 192)),
        *(FormatSpec(f"opus_48000_{k}", "opus", 48000, k) for k in (32, 64, 96, 128, 192)),
    ]
    if not socket:  # WAV files are HTTP's only
        specs += [
            FormatSpec(f"wav_{r}", "wav", r)
            for r in (8000, 16000, 22050, 24000, 32000, 44100, 48000)
        ]
    return {spec.name: spec for spec in specs}


SOCKET_FORMATS = _formats(socket=True)
HTTP_FORMATS = _formats(socket=False)
DEFAULT_FORMAT = "mp3_44100_128"
"""ElevenLabs' default ``output_format`` on every endpoint."""


def parse_output_format(name: str | None, *, socket: bool) -> FormatSpec:
    """The spec of an ``output_format`` name (None: the default); ProtocolError
    (unsupported_value) listing the allowed names otherwise."""
    table = SOCKET_FORMATS if socket else HTTP_FORMATS
    spec = table.get(DEFAULT_FORMAT if name is None else name)
    if spec is None:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VALUE,
            f"`output_format`: unsupported value {shown(str(name))!r}; allowed: "
            + ", ".join(table),
            param="output_format",
        )
    return spec


# --- models -----------------------------------------------------------------------

ELEVENLABS_MODELS = (
    "eleven_flash_v2_5",
    "eleven_flash_v2",
    "eleven_turbo_v2_5",
    "eleven_turbo_v2",
    "eleven_multilingual_v2",
    "eleven_multilingual_v1",
    "eleven_monolingual_v1",
    "eleven_english_sts_v2",
    "eleven_v3",
    "eleven_v3_conversational",
    "eleven_v4",
    "eleven_v4_turbo",
)
"""ElevenLabs' model ids: each one names the model this server has loaded."""


def is_elevenlabs_model(model_id: str) -> bool:
    return model_id.strip().lower() in ELEVENLABS_MODELS


# --- client -> server (sockets) ------------------------------------------------------

Unit = Annotated[float, Meta(ge=0.0, le=1.0)]
Speed = Annotated[float, Meta(ge=SPEED_MIN, le=SPEED_MAX)]
ChunkLength = Annotated[float, Meta(ge=50, le=500)]
ContextKey = Annotated[str, Meta(min_length=1, max_length=ID_MAX_LEN)]
Secret = Annotated[str, Meta(max_length=4096)]
DictionaryId = Annotated[str, Meta(max_length=ID_MAX_LEN)]


class VoiceSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``voice_settings``: only ``speed`` has an equivalent here (the others are
    accepted within ElevenLabs' ranges and have no effect)."""

    stability: Unit | None = None
    similarity_boost: Unit | None = None
    style: Unit | None = None
    use_speaker_boost: bool | None = None
    speed: Speed | None = None


class GenerationConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``generation_config``: accepted, no effect (text is cut at sentence ends here)."""

    chunk_length_schedule: Annotated[list[ChunkLength], Meta(max_length=32)] | None = None


class DictionaryLocator(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A pronunciation dictionary: accepted, no effect (this server has none)."""

    pronunciation_dictionary_id: DictionaryId
    version_id: DictionaryId | None = None


Locators = Annotated[list[DictionaryLocator], Meta(max_length=3)]


class StreamInput(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One client message of either text-to-speech socket."""

    text: str | None = None
    flush: bool | None = None
    try_trigger_generation: bool | None = None
    voice_settings: VoiceSettings | None = None
    generation_config: GenerationConfig | None = None
    pronunciation_dictionary_locators: Locators | None = None
    xi_api_key: Secret | None = None
    xi_api_key_dashed: Secret | None = msgspec.field(default=None, name="xi-api-key")
    authorization: Secret | None = None
    # multi-stream-input only
    context_id: ContextKey | None = None
    contextId: ContextKey | None = None  # noqa: N815 - the wire name
    close_context: bool | None = None
    close_socket: bool | None = None

    @property
    def context(self) -> str | None:
        return self.context_id if self.context_id is not None else self.contextId


_MULTI_ONLY = ("context_id", "contextId", "close_context", "close_socket")
_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `(?P<field>.*)`")
_input_decoder = msgspec.json.Decoder(StreamInput)


def _fields_of(struct: type[msgspec.Struct]) -> list[str]:
    return list(struct.__struct_encode_fields__)


def decode_error(exc_text: str, struct: type[msgspec.Struct], where: str = "") -> ProtocolError:
    """A msgspec validation message as a ProtocolError naming the field; an unknown field
    is named with the fields allowed there."""
    path_match = re.search(r" - at `\$(?P<path>[^`]*)`$", exc_text)
    path = path_match.group("path").removeprefix(".") if path_match else ""
    unknown = _UNKNOWN_FIELD.match(exc_text)
    if unknown is None:
        raise AssertionError("not an unknown-field error")  # pragma: no cover
    field = unknown.group("field")
    name = f"{path}.{field}" if path else field
    allowed = ", ".join(_fields_of(_struct_at(struct, path)))
    return ProtocolError(
        ErrorCode.INVALID_FIELD,
        f"unknown field `{shown(name, SHOWN_MAX)}`{where}; allowed: {allowed}",
        param=shown(name, SHOWN_MAX),
    )


def _struct_at(struct: type[msgspec.Struct], path: str) -> type[msgspec.Struct]:
    """The Struct type found at ``path`` (e.g. ``voice_settings``) under ``struct``."""
    nested: dict[str, type[msgspec.Struct]] = {
        "voice_settings": VoiceSettings,
        "generation_config": GenerationConfig,
        "pronunciation_dictionary_locators": DictionaryLocator,
        "inputs": DialogueText,
        "settings": DialogueSettings,
    }
    head = re.sub(r"\[\d+\]", "", path.split(".", 1)[0]) if path else ""
    return nested.get(head, struct)


def decode_struct(decoder: msgspec.json.Decoder, data: str | bytes, struct: type) -> Any:
    """Decode one JSON object into ``struct``; ProtocolError naming what is wrong."""
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        if _UNKNOWN_FIELD.match(str(exc)):
            raise decode_error(str(exc), struct) from None
    except (msgspec.DecodeError, UnicodeEncodeError, RecursionError):
        pass
    # Anything else: the codec's mapping (bad JSON, types, ranges, nesting, surrogates).
    return decode_tagged(decoder, data, ())


def decode_input(data: str | bytes, *, multi: bool) -> StreamInput:
    """One socket message, validated; raises ProtocolError."""
    msg: StreamInput = decode_struct(_input_decoder, data, StreamInput)
    if not multi:
        for name in _MULTI_ONLY:
            if getattr(msg, name) is not None:
                raise ProtocolError(
                    ErrorCode.INVALID_FIELD,
                    f"`{name}` belongs to the multi-context socket"
                    " (/v1/text-to-speech/{voice_id}/multi-stream-input); this socket speaks"
                    " one context",
                    param=name,
                )
    if None not in (msg.context_id, msg.contextId) and msg.context_id != msg.contextId:
        raise ProtocolError(
            ErrorCode.INVALID_FIELD,
            "`context_id` and `contextId` name different contexts; send one of them",
            param="contextId",
            context_id=msg.context_id,
        )
    if msg.text is not None:
        check_text(msg.text, "text")
    return msg


# --- client -> server (the text-to-dialogue socket) -------------------------------------


class DialogueText(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One input of a dialogue message: text and the voice that speaks it."""

    text: str
    voice_id: Annotated[str, Meta(max_length=ID_MAX_LEN)]


class DialogueInput(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One client message of ``/v1/text-to-dialogue/multi-stream-input``: a context's
    first message names its voice (``voices``), later ones carry ``inputs``."""

    context_id: ContextKey | None = None
    voices: (
        Annotated[list[Annotated[str, Meta(max_length=ID_MAX_LEN)]], Meta(max_length=8)] | None
    ) = None
    inputs: Annotated[list[DialogueText], Meta(max_length=64)] | None = None
    voice_settings: VoiceSettings | None = None
    pronunciation_dictionary_locators: Locators | None = None
    flush: bool | None = None
    close_context: bool | None = None
    close_socket: bool | None = None
    keep_alive: bool | None = None
    xi_api_key: Secret | None = None
    xi_api_key_dashed: Secret | None = msgspec.field(default=None, name="xi-api-key")
    authorization: Secret | None = None

    @property
    def context(self) -> str | None:
        return self.context_id


_dialogue_decoder = msgspec.json.Decoder(DialogueInput)


def decode_dialogue_input(data: str | bytes) -> DialogueInput:
    """One text-to-dialogue socket message, validated; raises ProtocolError."""
    msg: DialogueInput = decode_struct(_dialogue_decoder, data, DialogueInput)
    for item in msg.inputs or ():
        check_text(item.text, "inputs.text")
    return msg


# --- server -> client (sockets) -------------------------------------------------------


class Alignment(msgspec.Struct, kw_only=True, frozen=True):
    """Which characters an audio message speaks, and when, in ms from the message's start
    (see ``protocol.compat_elevenlabs_alignment``)."""

    chars: list[str]
    charStartTimesMs: list[int]  # noqa: N815 - wire names
    charDurationsMs: list[int]  # noqa: N815


class AudioOutput(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    audio: str
    """Base64 audio in the socket's ``output_format`` (may be empty)."""
    normalizedAlignment: Alignment | None = None  # noqa: N815
    alignment: Alignment | None = None
    contextId: str | None = None  # noqa: N815


class FinalOutput(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    isFinal: bool  # noqa: N815 - always true; required so that it is always sent
    contextId: str | None = None  # noqa: N815


class ErrorOutput(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """An error: ``error`` is a stable code (``voice_not_found``, ``invalid_field``...),
    ``code`` the close code when the socket closes after it."""

    message: str
    error: str
    code: int | None = None
    contextId: str | None = None  # noqa: N815


class DialogueAlignment(msgspec.Struct, kw_only=True, frozen=True):
    """The text-to-dialogue socket's alignment: snake_case, times from the message's start."""

    chars: list[str]
    char_start_times_ms: list[int]
    char_durations_ms: list[int]


class DialogueAudio(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    audio: str
    alignment: DialogueAlignment | None = None
    context_id: str | None = None


class DialogueFinal(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    is_final: bool
    context_id: str | None = None


class DialogueError(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    message: str
    error: str
    code: int | None = None
    context_id: str | None = None


ServerOutput = (
    AudioOutput | FinalOutput | ErrorOutput | DialogueAudio | DialogueFinal | DialogueError
)


def encode_output(msg: ServerOutput) -> str:
    return encode_message(msg)


ERROR_NAMES = {
    ErrorCode.UNKNOWN_VOICE: "voice_not_found",
    ErrorCode.UNKNOWN_MODEL: "model_not_found",
    ErrorCode.UNAUTHORIZED: "invalid_api_key",
}
"""ElevenLabs' own names for a few of our error codes; the others keep ours."""


def error_name(code: str) -> str:
    return ERROR_NAMES.get(code, code)  # type: ignore[call-overload]


# --- query parameters ---------------------------------------------------------------------

Normalization = Literal["auto", "on", "off"]
Latency = Annotated[int, Meta(ge=0, le=4)]
Name = Annotated[str, Meta(max_length=ID_MAX_LEN)]


class SocketQuery(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The query of either text-to-speech socket (values arrive as strings)."""

    model_id: Name | None = None
    output_format: Name | None = None
    language_code: Name | None = None
    inactivity_timeout: Annotated[float, Meta(gt=0, le=3600)] | None = None
    sync_alignment: bool | None = None
    auto_mode: bool | None = None
    enable_logging: bool | None = None
    enable_ssml_parsing: bool | None = None
    optimize_streaming_latency: Latency | None = None
    apply_text_normalization: Normalization | None = None
    apply_language_text_normalization: bool | None = None
    # Credentials (checked before the upgrade by voiceserver.transport.auth).
    token: Secret | None = None
    api_key: Secret | None = None
    authorization: Secret | None = None
    xi_api_key_dashed: Secret | None = msgspec.field(default=None, name="xi-api-key")


class SpeechQuery(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The query of ``POST /v1/text-to-speech/{voice_id}[/stream][/with-timestamps]``."""

    output_format: Name | None = None
    enable_logging: bool | None = None
    optimize_streaming_latency: Latency | None = None


def convert_query(params: dict[str, str], struct: type[msgspec.Struct]) -> Any:
    """Query parameters (strings) as ``struct``; ProtocolError naming a bad one."""
    try:
        return msgspec.convert(params, struct, strict=False)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if _UNKNOWN_FIELD.match(text):
            raise decode_error(text, struct, " in the query") from None
        match = re.search(r" - at `\$\.(?P<path>[^`]*)`$", text)
        name = match.group("path") if match else None
        detail = text[: match.start()] if match else text
        raise ProtocolError(
            ErrorCode.INVALID_FIELD,
            f"query parameter `{name}`: {shown(detail, 200)}"
            if name
            else f"query: {shown(detail, 200)}",
            param=name,
        ) from None


# --- HTTP --------------------------------------------------------------------------------


class SpeechBody(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The body of the HTTP text-to-speech endpoints. Only ``text``, ``model_id``,
    ``language_code``, ``voice_settings.speed`` and ``seed`` have an effect here;
    the rest is accepted (ElevenLabs' clients send it) and ignored."""

    text: str
    model_id: Name | None = None
    language_code: Name | None = None
    voice_settings: VoiceSettings | None = None
    pronunciation_dictionary_locators: Locators | None = None
    seed: Annotated[int, Meta(ge=0, le=4294967295)] | None = None
    previous_text: Annotated[str, Meta(max_length=REF_TEXT_MAX_LEN)] | None = None
    next_text: Annotated[str, Meta(max_length=REF_TEXT_MAX_LEN)] | None = None
    previous_request_ids: Annotated[list[Name], Meta(max_length=3)] | None = None
    next_request_ids: Annotated[list[Name], Meta(max_length=3)] | None = None
    use_pvc_as_ivc: bool | None = None
    apply_text_normalization: Normalization | None = None
    apply_language_text_normalization: bool | None = None


_body_decoder = msgspec.json.Decoder(SpeechBody)


def decode_speech_body(data: bytes) -> SpeechBody:
    """An HTTP body, validated; raises ProtocolError."""
    body: SpeechBody = decode_struct(_body_decoder, data, SpeechBody)
    check_text(body.text, "text")
    return body


class DialogueSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A dialogue's ``settings``: accepted within ElevenLabs' ranges, no effect."""

    stability: Unit | None = None
    similarity: Unit | None = None
    clone_strength: Unit | None = None
    use_speaker_boost: bool | None = None


class DialogueBody(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The body of ``POST /v1/text-to-dialogue[/stream]``: the inputs are spoken one after
    another, each in its own voice."""

    inputs: Annotated[list[DialogueText], Meta(min_length=1, max_length=64)]
    model_id: Name | None = None
    language_code: Name | None = None
    settings: DialogueSettings | None = None
    pronunciation_dictionary_locators: Locators | None = None
    seed: Annotated[int, Meta(ge=0, le=4294967295)] | None = None
    apply_text_normalization: Normalization | None = None
    previous_text: Annotated[str, Meta(max_length=REF_TEXT_MAX_LEN)] | None = None
    future_text: Annotated[str, Meta(max_length=REF_TEXT_MAX_LEN)] | None = None
    previous_request_ids: Annotated[list[Name], Meta(max_length=3)] | None = None
    next_request_ids: Annotated[list[Name], Meta(max_length=3)] | None = None
    use_pvc_as_ivc: bool | None = None


_dialogue_body_decoder = msgspec.json.Decoder(DialogueBody)


def decode_dialogue_body(data: bytes) -> DialogueBody:
    """A text-to-dialogue HTTP body, validated; raises ProtocolError."""
    body: DialogueBody = decode_struct(_dialogue_body_decoder, data, DialogueBody)
    for item in body.inputs:
        check_text(item.text, "inputs.text")
    return body


class CharacterAlignment(msgspec.Struct, kw_only=True, frozen=True):
    """HTTP's alignment: seconds from the start of the response's audio."""

    characters: list[str]
    character_start_times_seconds: list[float]
    character_end_times_seconds: list[float]


class AudioWithTimestamps(msgspec.Struct, kw_only=True, frozen=True):
    audio_base64: str
    alignment: CharacterAlignment | None
    normalized_alignment: CharacterAlignment | None


class ErrorDetail(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """ElevenLabs' HTTP error body is ``{"detail": {"status", "message"}}``."""

    status: str
    message: str
    param: str | None = None


class HttpError(msgspec.Struct, kw_only=True, frozen=True):
    detail: ErrorDetail
