"""Messages of vllm-omni's streaming-text WebSocket (our ``/v1/audio/speech/stream``).

Looked up in vllm-project/vllm-omni at commit 0131cb5560450800b800e889fb849ea2c851bd3f:
``vllm_omni/entrypoints/openai/serving_speech_stream.py`` (the handler and its protocol
docstring) and ``StreamingSpeechSessionConfig`` in
``vllm_omni/entrypoints/openai/protocol/audio.py``; token-level streaming (``streaming_mode``)
at commit 3bd41202495f7b870d44f54b39486919da5d15da (pull request 5470,
``examples/online_serving/text_to_speech/qwen3_tts/token_level_streaming_client.py``); the
timestamp transport and voice messages in basetenlabs/vllm-omni at commit
1fecfad19ce0e474cfc94fea46ea38b056d2d8eb, as LiveKit's Baseten plugin
(``livekit-plugins-baseten`` 1.8.9, ``qwen3_tts.py``) speaks them. What it speaks:

Client -> server (JSON text frames, field ``type``):

- ``session.config``: first message, may be repeated between utterances. Fields (all
  optional): ``model``, ``voice`` (also accepted as ``speaker``), ``task_type``
  (CustomVoice | VoiceDesign | Base), ``language``, ``instructions``, ``response_format``
  (wav | pcm | flac | mp3 | opus, default wav), ``speed`` (0.25..4.0, default 1.0),
  ``max_new_tokens`` (>= 1), ``initial_codec_chunk_frames`` (>= 0),
  ``non_streaming_mode``, ``ref_audio``, ``ref_text``, ``x_vector_only_mode``,
  ``speaker_embedding`` (list of floats, at most 8192), ``stream_audio`` (default false:
  one binary frame per sentence; true: raw PCM chunks as they come), ``word_timestamps``
  (default false), ``seed``, ``split_granularity`` (none | sentence | clause, default
  none: buffer until ``input.done``). vllm-omni also refuses ``stream_audio`` with a
  format other than pcm or a speed other than 1.0; those are capability limits of that
  server, so they are left to ours to decide.

  ``max_new_tokens``, ``seed``, ``x_vector_only_mode`` and ``non_streaming_mode`` are
  model options: carried as sent, checked by the server against the served model's
  declaration (``voiceserver.params``), as on every endpoint.

  Our additions and departures (docs/vllm-socket.md says why): ``options`` (the
  served model's options by name, as on the native socket), ``sample_rate`` (the
  output rate, default 24000 as vllm-omni's Qwen3-TTS and our HTTP ``pcm``),
  and ``split_granularity`` left out means ``clause`` (:data:`DEFAULT_SPLIT`), so speech
  starts before the reply ends.

  ``streaming_mode`` (pull request 5470): ``sentence`` (or left out) cuts the text into
  requests by ``split_granularity``; ``token_level`` speaks one utterance as one request
  started by its first ``input.text`` and extended by the later ones; ``sentence_commit``
  is refused here (not offered).

  Baseten's timestamps: ``timestamp_type: "word"`` asks for word timings with the audio
  left as it is (binary frames); ``timestamp_transport_strategy`` ``sync`` (default)
  puts each sentence's in its ``audio.done`` (``timestamp_info``), ``async`` sends them
  in ``timestamps`` messages after the utterance's audio, before ``session.done``.
  vllm-omni's ``word_timestamps: true`` is the other form (``audio.chunk``, below).
- ``input.text``: ``text`` (string; missing means "").
- ``input.done``: ends the utterance (a flush, the connection stays open).
- ``session.close``: ends the connection.
- ``voice.list``; ``voice.add`` (``name``, ``consent``, ``audio_data``: base64 audio,
  ``audio_format``, ``ref_text``, ``speaker_description``; Baseten's ``speaker_embedding``
  form is refused here); ``voice.remove`` (``name``). Any time, before the first
  ``session.config`` too.

Server -> client:

- ``audio.start``: ``utterance_index``, ``sentence_index``, ``sentence_text``, ``format``;
  with streamed pcm also ``sample_rate`` and ``channels`` (s16le); ``word_timestamps: true``
  when word timestamps are on. Ours names ``sample_rate`` and ``channels`` for every
  format (extra fields, which vllm-omni's clients read with ``.get`` or ignore).
- binary frames: the audio bytes (no header). vllm-omni's clients join every binary
  frame between ``audio.start`` and ``audio.done``, so one sentence may come in several.
- ``audio.chunk`` (only with ``word_timestamps``): ``utterance_index``, ``sentence_index``,
  ``chunk_id``, ``chunk_start_ms``, ``chunk_end_ms``, ``sample_rate``, ``channels``,
  ``audio_b64``, ``timestamps`` (null, or a list of ``{word, start_ms, end_ms}`` on the
  trailing empty chunk of a sentence).
- ``audio.done``: ``utterance_index``, ``sentence_index``, ``total_bytes``, ``error``;
  ``timestamp_info`` (``{word_alignment: {words, word_start_times_seconds,
  word_end_times_seconds}}``) with Baseten's ``sync`` timestamps.
- ``timestamps``: ``utterance_index``, ``sentence_index``, ``timestamp_info`` or ``error``
  (Baseten's ``async`` timestamps).
- ``voice.list.result`` (``voices``: built-in names, ``uploaded_voices``: entries),
  ``voice.add.result`` (``success``, ``voice`` or ``error``), ``voice.remove.result``
  (``success``, ``name``, ``error``).
- ``session.done``: ``utterance_index``, ``total_sentences`` (ends the utterance, not
  the connection).
- ``error``: ``message``; ``partial_audio: true`` and ``action: "discard"`` when a
  sentence failed after some of its audio was sent.

``utterance_index`` counts ``input.done`` flushes; ``sentence_index`` counts requests
inside one flush.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import UNSET, Meta, UnsetType

from protocol.codec import decode_tagged, encode_message, message_tags
from protocol.errors import ProtocolError
from protocol.messages import INT64_MAX, LongText, Name, Options, RefText, Speed

ResponseFormat = Literal["wav", "pcm", "flac", "mp3", "opus"]
TaskType = Literal["CustomVoice", "VoiceDesign", "Base"]
SplitGranularity = Literal["none", "sentence", "clause"]
TimestampType = Literal["word", "none"]
TimestampStrategy = Literal["sync", "async"]
StreamingMode = Literal["sentence", "token_level", "sentence_commit"]

DEFAULT_SPLIT: SplitGranularity = "clause"
"""Our ``split_granularity`` when a config leaves it out (vllm-omni's is ``none``)."""

_ALLOWED: dict[str, tuple[object, ...]] = {
    "response_format": get_args(ResponseFormat),
    "task_type": get_args(TaskType),
    "split_granularity": get_args(SplitGranularity),
    "timestamp_type": get_args(TimestampType),
    "timestamp_transport_strategy": get_args(TimestampStrategy),
    "streaming_mode": get_args(StreamingMode),
}


class _VllmClient(msgspec.Struct, tag_field="type", kw_only=True, frozen=True, omit_defaults=True):
    pass


class VllmSessionConfig(_VllmClient, tag="session.config"):
    model: Name | None = None
    voice: Name | None = None
    speaker: Name | None = None  # vllm-omni's alias of `voice`
    task_type: TaskType | None = None
    language: Name | None = None
    instructions: LongText | None = None
    response_format: ResponseFormat = "wav"
    speed: Speed | None = 1.0
    max_new_tokens: Any = None
    initial_codec_chunk_frames: Annotated[int, Meta(ge=0, le=INT64_MAX)] | None = None
    non_streaming_mode: Any = None
    ref_audio: str | None = None
    ref_text: RefText | None = None
    x_vector_only_mode: Any = None
    speaker_embedding: Annotated[list[float], Meta(max_length=8192)] | None = None
    stream_audio: bool = False
    word_timestamps: bool = False
    timestamp_type: TimestampType | None = None
    seed: Any = None
    split_granularity: SplitGranularity | None = None
    streaming_mode: StreamingMode | None = None
    timestamp_transport_strategy: TimestampStrategy | None = None
    sample_rate: Annotated[int, Meta(ge=1, le=2**31 - 1)] | None = None
    options: Options | None = None

    @property
    def effective_voice(self) -> str | None:
        """``voice``, or its alias ``speaker``."""
        return self.voice if self.voice is not None else self.speaker

    @property
    def wants_word_timestamps(self) -> bool:
        """Word timings asked either way: ``word_timestamps: true`` or ``timestamp_type:
        "word"``."""
        return self.word_timestamps or self.wants_timestamp_info

    @property
    def wants_timestamp_info(self) -> bool:
        """Baseten's form: ``timestamp_type: "word"`` (audio stays binary)."""
        return self.timestamp_type == "word"

    @property
    def timestamp_strategy(self) -> TimestampStrategy:
        """``timestamp_transport_strategy``, ``sync`` when left out (Baseten's default)."""
        return self.timestamp_transport_strategy or "sync"

    @property
    def token_level(self) -> bool:
        """One request per utterance, extended by each ``input.text``."""
        return self.streaming_mode == "token_level"

    @property
    def effective_split(self) -> SplitGranularity:
        """``split_granularity``, or :data:`DEFAULT_SPLIT` when left out."""
        return DEFAULT_SPLIT if self.split_granularity is None else self.split_granularity


class VllmInputText(_VllmClient, tag="input.text"):
    text: str = ""


class VllmInputDone(_VllmClient, tag="input.done"):
    pass


class VllmSessionClose(_VllmClient, tag="session.close"):
    pass


class VllmVoiceList(_VllmClient, tag="voice.list"):
    pass


class VllmVoiceAdd(_VllmClient, tag="voice.add"):
    """Baseten's voice upload; the values are checked as ``POST /v1/audio/voices`` checks
    its fields (names, lengths, the audio), by the server."""

    name: Any = None
    consent: str | None = None
    audio_data: str | None = None
    """The reference audio, base64 (a ``data:`` URL too)."""
    audio_format: Name | None = None
    """The file's extension (``wav``, ``mp3``, ...): its MIME type is kept with the voice."""
    ref_text: str | None = None
    speaker_description: str | None = None
    x_vector_only_mode: bool | None = None
    speaker_embedding: Any = None
    """Baseten's other form of a voice; refused here (no model clones from a vector alone)."""


class VllmVoiceRemove(_VllmClient, tag="voice.remove"):
    name: Name | None = None


VllmClientMessage = (
    VllmSessionConfig
    | VllmInputText
    | VllmInputDone
    | VllmSessionClose
    | VllmVoiceList
    | VllmVoiceAdd
    | VllmVoiceRemove
)
VOICE_MESSAGES = ("voice.list", "voice.add", "voice.remove")


class _VllmServer(msgspec.Struct, tag_field="type", kw_only=True, frozen=True, omit_defaults=True):
    pass


class VllmAudioStart(_VllmServer, tag="audio.start"):
    utterance_index: int
    sentence_index: int
    sentence_text: str
    format: str
    sample_rate: int | None = None
    channels: int | None = None
    word_timestamps: bool | None = None


class VllmWordTimestamp(msgspec.Struct, kw_only=True, frozen=True):
    word: str
    start_ms: int | float
    end_ms: int | float


class VllmAudioChunk(_VllmServer, tag="audio.chunk"):
    utterance_index: int
    sentence_index: int
    chunk_id: int
    chunk_start_ms: int
    chunk_end_ms: int
    sample_rate: int
    channels: int
    audio_b64: str
    timestamps: list[VllmWordTimestamp] | None


class WordAlignment(msgspec.Struct, kw_only=True, frozen=True):
    """Baseten's word timings of one sentence, in seconds from its first sample."""

    words: list[str]
    word_start_times_seconds: list[float]
    word_end_times_seconds: list[float]


class TimestampInfo(msgspec.Struct, kw_only=True, frozen=True):
    word_alignment: WordAlignment


# omit_defaults=False: vllm-omni always sends total_bytes and error; the defaults only
# let older servers' audio.done (without them) decode. timestamp_info is left out unless
# set (UNSET), as Baseten's server sends it only with sync timestamps.
class VllmAudioDone(_VllmServer, tag="audio.done", omit_defaults=False):
    utterance_index: int
    sentence_index: int
    total_bytes: int = 0
    error: bool = False
    timestamp_info: TimestampInfo | UnsetType = UNSET


class VllmTimestamps(_VllmServer, tag="timestamps"):
    """One sentence's word timings, sent after the utterance's audio (``async``)."""

    utterance_index: int
    sentence_index: int
    timestamp_info: TimestampInfo | None = None
    error: str | None = None


class VllmSessionDone(_VllmServer, tag="session.done"):
    utterance_index: int
    total_sentences: int


class VllmError(_VllmServer, tag="error"):
    message: str
    partial_audio: bool | None = None
    action: Literal["discard"] | None = None


class VllmVoiceListResult(_VllmServer, tag="voice.list.result"):
    voices: list[str]
    """The model's built-in voices."""
    uploaded_voices: list[dict[str, Any]]
    """The stored clones, as ``GET /v1/audio/voices`` lists them."""


class VllmVoiceAddResult(_VllmServer, tag="voice.add.result"):
    success: bool
    voice: dict[str, Any] | None = None
    error: str | None = None


class VllmVoiceRemoveResult(_VllmServer, tag="voice.remove.result"):
    success: bool
    name: str
    error: str | None = None


VllmServerMessage = (
    VllmAudioStart
    | VllmAudioChunk
    | VllmAudioDone
    | VllmTimestamps
    | VllmSessionDone
    | VllmError
    | VllmVoiceListResult
    | VllmVoiceAddResult
    | VllmVoiceRemoveResult
)

_client_decoder = msgspec.json.Decoder(VllmClientMessage)
_server_decoder = msgspec.json.Decoder(VllmServerMessage)
_CLIENT_TYPES = message_tags(get_args(VllmClientMessage))
_SERVER_TYPES = message_tags(get_args(VllmServerMessage))


def decode_vllm_client(data: str | bytes) -> VllmClientMessage:
    """Decode one client message of the compatibility endpoint; raises ProtocolError."""
    return decode_tagged(_client_decoder, data, _CLIENT_TYPES, _ALLOWED)


def decode_vllm_server(data: str | bytes) -> VllmServerMessage:
    """Decode one server message of the compatibility endpoint; raises ProtocolError."""
    return decode_tagged(_server_decoder, data, _SERVER_TYPES, _ALLOWED)


def encode_vllm_server(msg: VllmServerMessage) -> str:
    return encode_message(msg)


def encode_vllm_client(msg: VllmClientMessage) -> str:
    return encode_message(msg)


def vllm_error(err: ProtocolError) -> VllmError:
    """The compatibility endpoint's ``error`` for a rejected message (it has only a text)."""
    return VllmError(message=f"{err.code}: {err.message}")
