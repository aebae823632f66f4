"""POST /v1/audio/speech: OpenAI's speech endpoint, streamed, plus vllm-omni's extras.

What clients send (checked against OpenAI's API reference as the ``openai``
package 3.x documents it, and vllm-omni's ``OpenAICreateSpeechRequest`` at
commit 0131cb5, ``vllm_omni/entrypoints/openai/protocol/audio.py``):

- OpenAI: ``model`` (required there, optional here: any name the model answers
  to, see ``voiceserver.names``, or one of OpenAI's ``tts-1``, ``tts-1-hd``,
  ``gpt-4o-mini-tts``, which mean the served model; an unknown one is a 404),
  ``input`` (OpenAI caps it at 4096 characters; here
  ``limits.max_text_chars``), ``voice`` (a name, or ``{"id": name}``; OpenAI's
  voice names speak in the voice ``ModelConfig.openai_voices`` maps them to,
  by default the model's default voice),
  ``instructions``, ``response_format`` (mp3 | opus | aac | flac | wav | pcm,
  default mp3), ``speed`` (0.25..4.0, default 1.0), ``stream_format``
  (audio | sse; OpenAI refuses sse only for its older models, not per format).
- vllm-omni: ``speaker`` (alias of ``voice``), ``sample_rate`` (output rate),
  ``language`` (any spelling, ``voiceserver.languages``), ``task_type``
  (CustomVoice | VoiceDesign | Base, checked against the loaded variant by
  ``voiceserver.params``), ``ref_audio`` (base64 or a data: URI; a path,
  ``file://`` URI or URL only as ``ServerConfig.media`` allows),
  ``ref_text``, ``x_vector_only_mode``, ``speaker_embedding``, ``seed``,
  ``max_new_tokens``, ``non_streaming_mode``, ``initial_codec_chunk_frames``,
  ``extra_params`` (an object of model-specific settings), ``stream`` (true
  with no ``stream_format`` selects SSE; false asks for one whole file). Fields vllm-omni does not know are
  ignored there (pydantic drops them) and here too.

Model-specific extras go into ``SynthParams.extra`` under the names the model
families read (``x_vector_only_mode`` -> ``x_vector_only``,
``non_streaming_mode`` -> ``streaming_text`` negated); ``extra_params`` entries
go there as well, the explicit fields winning. ``initial_codec_chunk_frames``
is accepted and ignored: chunk sizes are engine configuration here.

A response streams unless ``stream`` is false: then the whole file is sent with
its length and its true sizes in its header (``voiceserver.audio.whole_file``;
``aac`` comes as M4A then). ``stream_format=audio`` sends the file's bytes in a
chunked body as they are encoded; ``sse`` sends
``data: {"type": "speech.audio.delta", "audio": <base64>}`` events carrying
the same bytes, then ``data: {"type": "speech.audio.done", "usage":
{"input_tokens", "output_tokens", "total_tokens"}}`` (OpenAI's event shapes).
vllm-omni allows SSE only with pcm/wav because its encoders are whole-file;
ours stream every format, so every format may go over SSE. Usage counts input
characters as input tokens and generated audio frames as output tokens. A
failure after the headers went out ends an audio body without its last chunk
(the client sees a truncated transfer) and an SSE stream with a
``speech.audio.error`` event (vllm-omni's name) carrying the error object.

What a request asked for that is ignored (a ``voice`` on a variant without
named voices) comes back in a ``Warning: 299 - "..."`` header and the log.
Headers are sent once the first audio exists, so errors that the engine finds
while starting (voice, reference audio) still get a proper status. Every
response carries ``x-request-id`` (the client's, or a new one).

A client that leaves cancels its context at once, before or after the headers;
one that stops reading is dropped after ``Limits.slow_reader_timeout_s`` (the
connection is aborted); a body that does not arrive within
``Limits.http_body_timeout_s`` gets 408. While the server drains for shutdown,
new requests get 503 ``server_shutdown``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from models.base import ModelInputError, SynthParams
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import INSTRUCTIONS_MAX_LEN, REF_TEXT_MAX_LEN
from protocol.validation import check_text
from voiceserver.audio.containers import (
    DEFAULT_RESPONSE_FORMAT,
    DEFAULT_SAMPLE_RATE,
    RESPONSE_FORMATS,
    SAMPLE_RATES,
    media_type,
)
from voiceserver.audio.pipeline import make_file_output
from voiceserver.clients import ClientId
from voiceserver.engine.client import Overloaded
from voiceserver.engine.messages import AudioChunk
from voiceserver.http.budget import request_client
from voiceserver.http.errors import (
    ApiError,
    check_auth,
    error_response,
    from_engine_failure,
    from_model_error,
    invalid,
)
from voiceserver.http.guard import (
    ClientGone,
    RequestGuard,
    SlowClient,
    cancel_on_disconnect,
    client_gone_response,
    send_within,
)
from voiceserver.names import is_openai_model, openai_voice
from voiceserver.params import resolve_params
from voiceserver.runtime import Runtime
from voiceserver.session.output import ContextOutput
from voiceserver.session.utterance import Utterance, UtteranceError
from voiceserver.tasks import TASK_TYPES

log = logging.getLogger(__name__)

STREAM_FORMATS = ("audio", "sse")
SPEED_RANGE = (0.25, 4.0)
MAX_BODY_BYTES = 16 << 20
"""Largest request body (vllm-omni caps reference audio at 10 MB)."""
_INT64 = (-(1 << 63), (1 << 63) - 1)
_NO_AUDIO = np.zeros(0, np.float32)


def runtime_of(request: Request) -> Runtime:
    return request.app.state.runtime


def request_id_of(request: Request) -> str:
    given = request.headers.get("x-request-id", "").strip()
    if given and len(given) <= 200 and given.isprintable():
        return given
    return uuid.uuid4().hex


async def read_body(request: Request) -> bytes:
    """The whole body, within ``MAX_BODY_BYTES`` (else 413) and the server's body
    deadline (else 408); ClientGone when the client leaves while sending it."""
    limit = runtime_of(request).server.limits.http_body_timeout_s
    parts, size = [], 0
    try:
        async with asyncio.timeout(limit):
            async for part in request.stream():
                size += len(part)
                if size > MAX_BODY_BYTES:
                    raise ApiError(
                        413,
                        f"request body is larger than {MAX_BODY_BYTES} bytes",
                        code=ErrorCode.MESSAGE_TOO_BIG,
                    )
                parts.append(part)
    except TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {limit:g} s",
            code=ErrorCode.REQUEST_TIMEOUT,
        ) from None
    except ClientDisconnect:
        raise ClientGone from None
    return b"".join(parts)


async def read_json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object, or a 400/408/413 ApiError."""
    data = await read_body(request)
    try:
        body = json.loads(data)
    except RecursionError:
        raise ApiError(
            400, "malformed JSON body: nested too deeply", code=ErrorCode.INVALID_JSON
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"malformed JSON body: {exc}", code=ErrorCode.INVALID_JSON) from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object", code=ErrorCode.INVALID_JSON)
    return body


# -- request fields ------------------------------------------------------------


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
    speed = fields.number("speed", *SPEED_RANGE)
    speed = 1.0 if speed is None else speed
    if speed != 1.0 and not caps.supports_speed:
        raise invalid(
            "speed",
            f"this model cannot change speed; allowed: 1.0 (got {speed})",
            ErrorCode.UNSUPPORTED_VALUE,
        )
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
    warnings: list[str] = []
    try:
        params = resolve_params(
            rt,
            model=model,
            voice=voice,
            language=fields.string("language"),
            speed=speed,
            instructions=instructions,
            extra=_model_extras(fields),
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


# Request fields that name a model setting differently (vllm-omni's), and how.
_RENAMED = {"x_vector_only_mode": "x_vector_only"}
_MODEL_KEYS = (
    "ref_audio",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "seed",
    "max_new_tokens",
    "speaker_embedding",
)


def _model_extras(fields: _Fields) -> dict[str, Any]:
    """The request's model settings, gathered under the names models use; their
    types and ranges are checked against the served model's own fields
    (``voiceserver.params``), as on every endpoint."""
    extra: dict[str, Any] = {}
    extra_params = fields.body.get("extra_params")
    if extra_params is not None:
        if not isinstance(extra_params, dict):
            raise invalid("extra_params", f"must be an object, got {_kind(extra_params)}")
        extra.update(extra_params)
    if fields.present("ref_text"):
        extra["ref_text"] = fields.text("ref_text", REF_TEXT_MAX_LEN)
    elif extra.get("ref_text") is not None:  # the same cap for one sent in extra_params
        extra["ref_text"] = _Fields(extra).text("ref_text", REF_TEXT_MAX_LEN)
    for key in _MODEL_KEYS:
        if fields.present(key):
            extra[key] = fields.body[key]
    for key, name in _RENAMED.items():
        if fields.present(key):
            extra[name] = fields.body[key]
    if fields.present("non_streaming_mode"):
        extra["streaming_text"] = not fields.boolean("non_streaming_mode")
    if fields.present("initial_codec_chunk_frames"):
        fields.integer("initial_codec_chunk_frames", 0, _INT64[1])
    return extra


# -- synthesis -------------------------------------------------------------------


class SpeechStream:
    """One request's audio: an engine context whose PCM becomes one file's bytes.

    The file's output stage runs through a ContextOutput: in place for PCM and
    WAV at the model's rate, in ``rt.encode_pool`` otherwise, one call at a time.
    ``close()`` frees the engine slot and the encoder at any point (a client that
    went away); it is idempotent.
    """

    def __init__(
        self,
        rt: Runtime,
        request: SpeechRequest,
        endpoint: str = "http",
        client: ClientId | None = None,
    ) -> None:
        self.rt = rt
        self.request = request
        self.endpoint = endpoint
        self.client = client
        """Whose share of the engine the request counts against."""
        self._samples_per_frame = rt.model.capabilities.samples_per_frame
        self._output: ContextOutput | None = None
        self._utterance: Utterance | None = None
        self._events: AsyncIterator[AudioChunk] | None = None
        self._first: AudioChunk | None = None
        self._closed = False

    @property
    def media_type(self) -> str:
        return media_type(self.request.response_format, self.request.whole_file)

    async def start(self) -> None:
        """Open the engine context and wait for its first audio; raises ApiError
        when the engine refuses the request."""
        request = self.request
        rate = self.rt.model.capabilities.sample_rate
        # Opening a codec and muxer (mp3, Ogg...) is codec work too: off the loop.
        build = self.rt.encode_pool.submit(
            make_file_output,
            request.response_format,
            rate,
            request.sample_rate,
            whole=request.whole_file,
        )
        self._output = ContextOutput(await asyncio.wrap_future(build), self.rt.encode_pool)
        if self._closed:  # closed while the stage was being built
            self._output.close()
        try:
            utterance = Utterance(
                self.rt, request.params, endpoint=self.endpoint, client=self.client
            )
        except Overloaded as exc:
            self.close()
            raise ApiError(
                exc.status, f"{exc}", code=exc.code, retry_after=exc.retry_after_s
            ) from None
        self._utterance = utterance
        self._events = utterance.events()
        utterance.append(self.request.text)
        utterance.end()
        try:
            self._first = await anext(self._events)
        except UtteranceError as err:
            self.close()
            raise from_engine_failure(err.code, err.message, err.param) from None
        except BaseException:
            self.close()
            raise

    async def chunks(self, on_samples: Callable[[int], None] | None = None) -> AsyncIterator[bytes]:
        """The file's bytes as they are encoded, ending with the file's end.
        Raises ApiError if the engine fails midway. ``on_samples`` is told how many
        (model-rate) samples each chunk holds before it is encoded, and may raise
        ApiError to stop the file there."""
        assert self._events is not None and self._output is not None, "start() first"
        output, chunk = self._output, self._first
        try:
            while chunk is not None:
                if on_samples is not None:
                    on_samples(len(chunk.pcm))
                data = b"".join(await output.feed(chunk.pcm))
                if data:
                    yield data
                chunk = None if chunk.final else await anext(self._events, None)
            # The file's end in a piece of its own, as each chunk's bytes are one.
            tail = b"".join(await output.feed(_NO_AUDIO, final=True))
        except UtteranceError as err:
            raise from_engine_failure(err.code, err.message, err.param) from None
        if tail:
            yield tail

    def usage(self) -> dict[str, int]:
        """OpenAI's usage object: input characters and generated audio frames."""
        chars = len(self.request.text)
        samples = self._utterance.samples if self._utterance is not None else 0
        frames = -(-samples // self._samples_per_frame)
        return {"input_tokens": chars, "output_tokens": frames, "total_tokens": chars + frames}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._utterance is not None:
            self._utterance.cancel()  # no-op once the context finished
        if self._output is not None:
            self._output.close()


async def synthesize(
    rt: Runtime,
    request: SpeechRequest,
    endpoint: str = "batch",
    client: ClientId | None = None,
    spend: Callable[[int], None] | None = None,
) -> tuple[bytes, dict[str, int]]:
    """The whole file and its usage (for the batch endpoint). ``spend`` is told the
    bytes of 16-bit audio at the requested rate that each chunk adds, before it is
    encoded (a whole file's encoder holds that much until the end), and may raise
    ApiError to stop the file."""
    stream = SpeechStream(rt, request, endpoint, client)
    scale = 2 * request.sample_rate / rt.model.capabilities.sample_rate

    def on_samples(samples: int) -> None:
        if spend is not None:
            spend(math.ceil(samples * scale))

    try:
        await stream.start()
        data = b"".join([part async for part in stream.chunks(on_samples)])
        return data, stream.usage()
    finally:
        stream.close()


def sse_event(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def _sse_body(stream: SpeechStream) -> AsyncIterator[bytes]:
    try:
        async for data in stream.chunks():
            audio = base64.b64encode(data).decode("ascii")
            yield sse_event({"type": "speech.audio.delta", "audio": audio})
    except ApiError as err:
        yield sse_event({"type": "speech.audio.error", **err.body()})
        return
    yield sse_event({"type": "speech.audio.done", "usage": stream.usage()})


class SpeechResponse(StreamingResponse):
    """A streamed body that frees its engine context however the response ends
    (finished, failed, the client went away, or stopped reading)."""

    def __init__(
        self,
        stream: SpeechStream,
        content: AsyncIterator[bytes],
        media_type: str,
        headers: Mapping[str, str],
        guard: RequestGuard,
    ) -> None:
        super().__init__(content, media_type=media_type, headers=headers)
        self._stream = stream
        self._guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        deadline = self._stream.rt.server.limits.slow_reader_timeout_s
        try:
            await super().__call__(scope, receive, send_within(scope, send, deadline))
        except SlowClient:
            log.info("dropped an HTTP client that read nothing for %g s", deadline)
            self._stream.rt.metrics.error(self._stream.endpoint, str(ErrorCode.SLOW_READER))
        except (ClientDisconnect, OSError):
            pass  # the client left: an ordinary end
        finally:
            self._stream.close()
            self._guard.release()


def shutting_down() -> ApiError:
    return ApiError(
        503,
        "the server is shutting down and takes no new requests; retry on another instance",
        code=ErrorCode.SERVER_SHUTDOWN,
    )


async def speech(request: Request) -> Response:
    request_id = request_id_of(request)
    rt = runtime_of(request)
    guard = RequestGuard(request, rt.lifecycle)
    try:
        check_auth(request, rt.server.api_keys)
        if rt.lifecycle.draining:
            raise shutting_down()
        body = await cancel_on_disconnect(
            request, load_ref_audio(rt, await read_json_object(request), request_client(request))
        )
        speech_request = parse_speech_request(rt, body)
        stream = SpeechStream(rt, speech_request, client=request_client(request))
        await cancel_on_disconnect(request, stream.start())
    except ApiError as err:
        guard.release()
        return error_response(err, request_id, rt.metrics, "http")
    except ClientGone:
        guard.release()
        return client_gone_response()
    except BaseException:
        guard.release()
        raise
    if speech_request.whole_file:
        return await _whole_file(request, request_id, rt, stream, speech_request, guard)
    headers = response_headers(request_id, speech_request)
    if speech_request.stream_format == "sse":
        headers["x-accel-buffering"] = "no"  # proxies must not hold events back
        return SpeechResponse(stream, _sse_body(stream), "text/event-stream", headers, guard)
    return SpeechResponse(stream, stream.chunks(), stream.media_type, headers, guard)


def response_headers(request_id: str, request: SpeechRequest) -> dict[str, str]:
    headers = {"x-request-id": request_id, "cache-control": "no-store"}
    if request.warnings:
        # RFC 9111's Warning shape (299: a miscellaneous persistent warning), ASCII-safe.
        text = "; ".join(request.warnings)
        headers["warning"] = '299 - "' + ascii(text)[1:-1].replace('"', "'") + '"'
    return headers


async def _whole_file(
    request: Request,
    request_id: str,
    rt: Runtime,
    stream: SpeechStream,
    speech_request: SpeechRequest,
    guard: RequestGuard,
) -> Response:
    """The whole file in one body with its length (``stream: false``)."""

    async def collect() -> bytes:
        return b"".join([part async for part in stream.chunks()])

    try:
        data = await cancel_on_disconnect(request, collect())
    except ApiError as err:
        return error_response(err, request_id, rt.metrics, "http")
    except ClientGone:
        return client_gone_response()
    finally:
        stream.close()
        guard.release()
    headers = response_headers(request_id, speech_request)
    return Response(data, media_type=stream.media_type, headers=headers)
