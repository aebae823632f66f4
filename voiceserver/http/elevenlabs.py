"""ElevenLabs' HTTP text-to-speech: ``POST /v1/text-to-speech/{voice_id}`` and its
``/stream``, ``/with-timestamps`` and ``/stream/with-timestamps`` variants
(docs/elevenlabs.md).

The body is ElevenLabs' (:class:`protocol.compat_elevenlabs.SpeechBody`), the query
carries ``output_format`` (``enable_logging`` and ``optimize_streaming_latency`` are
accepted and have no effect). The audio is spoken as on OpenAI's endpoint: one engine
context (several one after another for a text longer than the model speaks in one),
cancelled when the client leaves, dropped when it stops reading, a body that does not
arrive in time refused. Every variant streams its answer as it is made:

- ``/v1/text-to-speech/{voice_id}`` and ``/stream``: the audio bytes (a WAV from the
  first is one whole file, its length in its header; from ``/stream`` it is streamed
  with open sizes);
- ``/with-timestamps``: one JSON object ``{audio_base64, alignment,
  normalized_alignment}``, the alignment over the whole audio;
- ``/stream/with-timestamps``: one such object per line as audio is made, each with
  the characters that start in its audio, times counted from the start of the
  response (as ElevenLabs' and Pipecat's readers take them).

Errors are ElevenLabs' ``{"detail": {"status", "message"}}``: 404 ``voice_not_found``,
422 for a bad field (naming it), 400 ``model_not_found``, and the shared statuses (401,
408, 413, 429, 503).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from models.base import SynthParams
from protocol.codec import encode_message
from protocol.compat_elevenlabs import (
    AudioWithTimestamps,
    ErrorDetail,
    FormatSpec,
    HttpError,
    SpeechQuery,
    convert_query,
    decode_dialogue_body,
    decode_speech_body,
    error_name,
    parse_output_format,
)
from protocol.compat_elevenlabs_alignment import CharTimeline, absolute_alignment
from protocol.errors import ErrorCode, ProtocolError
from voiceserver.audio.pipeline import OutputStage
from voiceserver.clients import ClientId
from voiceserver.engine.client import Overloaded
from voiceserver.engine.messages import AudioChunk
from voiceserver.http.budget import request_client
from voiceserver.http.errors import ApiError, check_auth, from_engine_failure
from voiceserver.http.guard import (
    ClientGone,
    RequestGuard,
    cancel_on_disconnect,
    client_gone_response,
)
from voiceserver.http.speech import (
    SpeechResponse,
    read_body,
    request_id_of,
    runtime_of,
    shutting_down,
    text_pieces,
)
from voiceserver.runtime import Runtime
from voiceserver.session.output import ContextOutput
from voiceserver.session.utterance import Utterance, UtteranceError
from voiceserver.transport.compat_elevenlabs_audio import MEDIA_TYPES, make_encoder
from voiceserver.transport.compat_elevenlabs_settings import (
    check_model,
    language_of,
    speech_params,
)

log = logging.getLogger(__name__)

ENDPOINT = "http_elevenlabs"
_NO_AUDIO = np.zeros(0, np.float32)
_STATUS = {
    ErrorCode.UNKNOWN_VOICE: 404,
    ErrorCode.UNKNOWN_MODEL: 400,
    ErrorCode.INVALID_JSON: 400,
}
"""HTTP status of a refusal by code; other refusals of the request's fields are 422."""


@dataclass(frozen=True)
class Job:
    """One checked request: its parts (text and voice), spoken one after another."""

    parts: list[tuple[str, SynthParams]]
    spec: FormatSpec

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.parts)


def _check_text(rt: Runtime, text: str, field: str) -> None:
    if not text.strip():
        raise ProtocolError(
            ErrorCode.INVALID_FIELD, f"`{field}`: must contain text to speak", param=field
        )
    limit = rt.server.limits.max_text_chars
    if len(text) > limit:
        raise ProtocolError(
            ErrorCode.TEXT_TOO_LONG,
            f"`{field}`: {len(text)} characters, over this server's limit of {limit}",
            param=field,
        )


def _refused(err: ProtocolError) -> ApiError:
    return ApiError(_STATUS.get(err.code, 422), err.message, param=err.param, code=err.code)


def read_job(rt: Runtime, query_params: dict[str, str], data: bytes, voice_id: str) -> Job:
    """The request's query and body, checked; ApiError naming what is wrong."""
    try:
        query = convert_query(query_params, SpeechQuery)
        spec = parse_output_format(query.output_format, socket=False)
        body = decode_speech_body(data)
        _check_text(rt, body.text, "text")
        check_model(rt, body.model_id)
        settings = body.voice_settings
        params = speech_params(
            rt,
            voice_id,
            language=language_of(rt, body.language_code),
            speed=settings.speed if settings is not None else None,
            seed=body.seed,
        )
    except ProtocolError as err:
        raise _refused(err) from None
    return Job([(body.text, params)], spec)


def read_dialogue_job(rt: Runtime, query_params: dict[str, str], data: bytes) -> Job:
    """A text-to-dialogue request: each input in its voice; ApiError naming what is wrong."""
    try:
        query = convert_query(query_params, SpeechQuery)
        spec = parse_output_format(query.output_format, socket=False)
        body = decode_dialogue_body(data)
        _check_text(rt, "".join(item.text for item in body.inputs), "inputs.text")
        check_model(rt, body.model_id)
        language = language_of(rt, body.language_code)
        parts = [
            (item.text, speech_params(rt, item.voice_id, language=language, seed=body.seed))
            for item in body.inputs
            if item.text.strip()
        ]
    except ProtocolError as err:
        raise _refused(err) from None
    return Job(parts, spec)


def error_response(err: ApiError, request_id: str, rt: Runtime) -> Response:
    """ElevenLabs' error body for ``err``, with its status and headers."""
    code = str(err.code) if err.code else f"http_{err.status}"
    rt.metrics.error(ENDPOINT, code)
    message = err.message
    if err.status == 401 and message.startswith("missing API key"):
        message = "missing API key: send it in the xi-api-key header"
    headers = {"x-request-id": request_id}
    if err.retry_after is not None:
        headers["retry-after"] = str(err.retry_after)
    if err.status == 408:
        headers["connection"] = "close"  # the rest of the body may still be on its way
    detail = ErrorDetail(status=error_name(code), message=message, param=err.param)
    body = encode_message(HttpError(detail=detail))
    return Response(body, err.status, headers, media_type="application/json")


class ElevenLabsAudio:
    """One request's audio in its ``output_format``, with each character's timing when
    asked: the engine contexts that speak the text (several, one after another, for a
    text longer than the model speaks in one), their PCM encoded as it comes."""

    def __init__(
        self, rt: Runtime, job: Job, client: ClientId | None, *, timestamps: bool, whole: bool
    ) -> None:
        self.rt = rt
        self.endpoint = ENDPOINT
        self.job = job
        self._client = client
        self._timestamps = timestamps
        self._whole = whole
        self._rate = rt.model.capabilities.sample_rate
        most = rt.model.capabilities.max_context_chars
        self._pieces = [
            (piece, params) for text, params in job.parts for piece in text_pieces(text, most)
        ]
        self._offsets = _offsets(job.text, [piece for piece, _ in self._pieces])
        self.timeline = CharTimeline()
        self.timeline.add_text(job.text)
        self._output: ContextOutput | None = None
        self._utterance: Utterance | None = None
        self._events: AsyncIterator[AudioChunk] | None = None
        self._first: AudioChunk | None = None
        self._piece = 0
        self._samples_before = 0
        """Model-rate samples of the pieces before the current one."""
        self.samples = 0
        self._closed = False

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.job.spec.codec]

    async def start(self) -> None:
        """Open the first engine context and wait for its first audio; ApiError when
        the engine refuses the request."""
        # Opening a codec and muxer is codec work too: off the loop.
        build = self.rt.encode_pool.submit(self._build_stage)
        self._output = ContextOutput(await asyncio.wrap_future(build), self.rt.encode_pool)
        if self._closed:
            self._output.close()
        try:
            self._first = await self._speak(0)
        except BaseException:
            self.close()
            raise

    def _build_stage(self) -> OutputStage:
        return OutputStage(make_encoder(self.job.spec, whole=self._whole), self._rate)

    async def _speak(self, index: int) -> AudioChunk:
        if self._utterance is not None:
            self._samples_before += self._utterance.samples
        try:
            utterance = Utterance(
                self.rt,
                self._pieces[index][1],
                endpoint=ENDPOINT,
                client=self._client,
                word_timestamps=self._timestamps,
            )
        except Overloaded as exc:
            raise ApiError(
                exc.status, f"{exc}", code=exc.code, retry_after=exc.retry_after_s
            ) from None
        self._piece = index
        self._utterance = utterance
        self._events = utterance.events()
        utterance.append(self._pieces[index][0])
        utterance.end()
        try:
            return await anext(self._events)
        except UtteranceError as err:
            raise from_engine_failure(err.code, err.message, err.param) from None

    def _collect_words(self) -> None:
        utterance = self._utterance
        if utterance is None or not utterance.aligns_words:
            return
        offset = self._offsets[self._piece]
        before_ms = self._samples_before * 1000 / self._rate
        for word in utterance.take_words():
            self.timeline.add_word(
                offset + word.char_start,
                offset + word.char_end,
                before_ms + word.start_s * 1000,
                before_ms + word.end_s * 1000,
            )

    @property
    def aligned(self) -> bool:
        return self._timestamps and self._utterance is not None and self._utterance.aligns_words

    @property
    def audio_ms(self) -> float:
        return self.samples * 1000 / self._rate

    async def chunks(self) -> AsyncIterator[tuple[bytes, list[tuple[str, float]]]]:
        """The audio's bytes as they are encoded, each with the characters that start in
        the audio so far (the last with every character left); ApiError if the engine
        fails midway."""
        assert self._events is not None and self._output is not None, "start() first"
        output, chunk = self._output, self._first
        try:
            while chunk is not None:
                self._collect_words()
                self.samples += len(chunk.pcm)
                data = b"".join(await output.feed(chunk.pcm))
                chars = self.timeline.take(self.audio_ms) if self.aligned else []
                if data or chars:
                    yield data, chars
                if chunk.final and self._piece + 1 < len(self._pieces):
                    chunk = await self._speak(self._piece + 1)
                    continue
                chunk = None if chunk.final else await anext(self._events, None)
            self._collect_words()
            tail = b"".join(await output.feed(_NO_AUDIO, final=True))
        except UtteranceError as err:
            raise from_engine_failure(err.code, err.message, err.param) from None
        chars = self.timeline.take(self.audio_ms, final=True) if self.aligned else []
        if tail or chars:
            yield tail, chars

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._utterance is not None:
            self._utterance.cancel()  # no-op once the context finished
        if self._output is not None:
            self._output.close()


def _offsets(text: str, pieces: list[str]) -> list[int]:
    """Where each piece starts in ``text`` (pieces are cut from it in order)."""
    offsets, at = [], 0
    for piece in pieces:
        found = text.find(piece, at)
        at = found if found >= 0 else at
        offsets.append(at)
        at += len(piece)
    return offsets


def _line(data: bytes, chars: list[tuple[str, float]], end_ms: float, aligned: bool) -> bytes:
    alignment = absolute_alignment(chars, end_ms) if aligned and chars else None
    message = AudioWithTimestamps(
        audio_base64=base64.b64encode(data).decode("ascii"),
        alignment=alignment,
        normalized_alignment=alignment,
    )
    return encode_message(message).encode() + b"\n"


async def _lines(audio: ElevenLabsAudio) -> AsyncIterator[bytes]:
    async for data, chars in audio.chunks():
        yield _line(data, chars, audio.audio_ms, audio.aligned)


async def _bytes(audio: ElevenLabsAudio) -> AsyncIterator[bytes]:
    async for data, _ in audio.chunks():
        if data:
            yield data


async def _whole_json(audio: ElevenLabsAudio) -> AsyncIterator[bytes]:
    parts: list[bytes] = []
    chars: list[tuple[str, float]] = []
    async for data, more in audio.chunks():
        parts.append(data)
        chars += more
    yield _line(b"".join(parts), chars, audio.audio_ms, audio.aligned)


async def _respond(
    request: Request, *, stream: bool, timestamps: bool, dialogue: bool = False
) -> Response:
    request_id = request_id_of(request)
    rt = runtime_of(request)
    guard = RequestGuard(request, rt.lifecycle)
    try:
        check_auth(request, rt.server.api_keys)
        if rt.lifecycle.draining:
            raise shutting_down()
        query, data = dict(request.query_params), await read_body(request)
        if dialogue:
            job = read_dialogue_job(rt, query, data)
        else:
            job = read_job(rt, query, data, request.path_params["voice_id"])
        whole = not stream and job.spec.codec == "wav" and not timestamps
        audio = ElevenLabsAudio(
            rt, job, request_client(request), timestamps=timestamps, whole=whole
        )
        await cancel_on_disconnect(request, audio.start())
    except ApiError as err:
        guard.release()
        return error_response(err, request_id, rt)
    except ClientGone:
        guard.release()
        return client_gone_response()
    except BaseException:
        guard.release()
        raise
    headers = {"x-request-id": request_id, "cache-control": "no-store"}
    if timestamps:
        body = _lines(audio) if stream else _whole_json(audio)
        media_type = "application/x-ndjson" if stream else "application/json"
        return SpeechResponse(audio, body, media_type, headers, guard)
    return SpeechResponse(audio, _bytes(audio), audio.media_type, headers, guard)


async def text_to_speech(request: Request) -> Response:
    """``POST /v1/text-to-speech/{voice_id}``: the audio."""
    return await _respond(request, stream=False, timestamps=False)


async def text_to_speech_stream(request: Request) -> Response:
    """``POST /v1/text-to-speech/{voice_id}/stream``: the audio, streamed."""
    return await _respond(request, stream=True, timestamps=False)


async def text_to_speech_with_timestamps(request: Request) -> Response:
    """``POST /v1/text-to-speech/{voice_id}/with-timestamps``: audio and alignment."""
    return await _respond(request, stream=False, timestamps=True)


async def text_to_dialogue(request: Request) -> Response:
    """``POST /v1/text-to-dialogue``: the inputs' audio, one voice after another."""
    return await _respond(request, stream=False, timestamps=False, dialogue=True)


async def text_to_dialogue_stream(request: Request) -> Response:
    """``POST /v1/text-to-dialogue/stream``: the same, streamed."""
    return await _respond(request, stream=True, timestamps=False, dialogue=True)


async def text_to_speech_stream_with_timestamps(request: Request) -> Response:
    """``POST /v1/text-to-speech/{voice_id}/stream/with-timestamps``: one JSON line per
    piece of audio."""
    return await _respond(request, stream=True, timestamps=True)
