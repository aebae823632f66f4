"""Messages of vllm-omni's streaming-text WebSocket (our ``/v1/audio/speech/stream``).

Looked up in vllm-project/vllm-omni at commit 0131cb5560450800b800e889fb849ea2c851bd3f:
``vllm_omni/entrypoints/openai/serving_speech_stream.py`` (the handler and its protocol
docstring) and ``StreamingSpeechSessionConfig`` in
``vllm_omni/entrypoints/openai/protocol/audio.py``. What it speaks:

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
  ``timestamp_type`` (``"word"`` is another way to ask for ``word_timestamps``, as
  framework plugins do), and ``split_granularity`` left out means ``clause``
  (:data:`DEFAULT_SPLIT`), so speech starts before the reply ends.
- ``input.text``: ``text`` (string; missing means "").
- ``input.done``: ends the utterance (a flush, the connection stays open).
- ``session.close``: ends the connection.

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
- ``audio.done``: ``utterance_index``, ``sentence_index``, ``total_bytes``, ``error``.
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
from msgspec import Meta

from protocol.codec import decode_tagged, encode_message, message_tags
from protocol.errors import ProtocolError
from protocol.messages import INT64_MAX, LongText, Name, Options, RefText, Speed

ResponseFormat = Literal["wav", "pcm", "flac", "mp3", "opus"]
TaskType = Literal["CustomVoice", "VoiceDesign", "Base"]
SplitGranularity = Literal["none", "sentence", "clause"]
TimestampType = Literal["word", "none"]

DEFAULT_SPLIT: SplitGranularity = "clause"
"""Our ``split_granularity`` when a config leaves it out (vllm-omni's is ``none``)."""

_ALLOWED: dict[str, tuple[object, ...]] = {
    "response_format": get_args(ResponseFormat),
    "task_type": get_args(TaskType),
    "split_granularity": get_args(SplitGranularity),
    "timestamp_type": get_args(TimestampType),
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
    sample_rate: Annotated[int, Meta(ge=1, le=2**31 - 1)] | None = None
    options: Options | None = None

    @property
    def effective_voice(self) -> str | None:
        """``voice``, or its alias ``speaker``."""
        return self.voice if self.voice is not None else self.speaker

    @property
    def wants_word_timestamps(self) -> bool:
        """Asked either way: ``word_timestamps: true`` or ``timestamp_type: "word"``."""
        return self.word_timestamps or self.timestamp_type == "word"

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


VllmClientMessage = VllmSessionConfig | VllmInputText | VllmInputDone | VllmSessionClose


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


# omit_defaults=False: vllm-omni always sends total_bytes and error; the defaults only
# let older servers' audio.done (without them) decode.
class VllmAudioDone(_VllmServer, tag="audio.done", omit_defaults=False):
    utterance_index: int
    sentence_index: int
    total_bytes: int = 0
    error: bool = False


class VllmSessionDone(_VllmServer, tag="session.done"):
    utterance_index: int
    total_sentences: int


class VllmError(_VllmServer, tag="error"):
    message: str
    partial_audio: bool | None = None
    action: Literal["discard"] | None = None


VllmServerMessage = VllmAudioStart | VllmAudioChunk | VllmAudioDone | VllmSessionDone | VllmError

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
