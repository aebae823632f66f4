"""Cartesia's HTTP endpoints: ``POST /tts/bytes``, ``POST /tts/sse``, ``GET /voices``,
``GET /voices/{id}`` (docs/cartesia.md).

A request body is Cartesia's (``model_id``, ``transcript``, ``voice``, ``output_format``,
``language``, ``generation_config``, ``speed``; SSE also ``add_timestamps`` and
``context_id``), read by :mod:`protocol.compat_cartesia`; the audio is one engine context
as on OpenAI's endpoint (cancelled when the client leaves, dropped
when it stops reading). ``/tts/bytes`` streams ``raw`` (any of the four encodings),
``wav`` (the same four) or ``mp3`` (``bit_rate``); ``/tts/sse`` sends ``chunk`` events
of raw audio, ``timestamps`` events when asked, then ``done``. Errors are Cartesia's
error object (``error_code``, ``title``, ``message``, ``request_id``) with the status.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from models.base import ModelInputError, SynthParams
from protocol.compat_cartesia import (
    DEFAULT_MP3_BIT_RATE,
    CartesiaRequest,
    Chunk,
    Done,
    TimestampsMessage,
    WordTimestamps,
    convert_request,
    encode_server,
    error_event,
    http_error_body,
    ignored_fields,
    lookup_voice,
    requested_speed,
    served_model,
    status_of,
)
from protocol.errors import ErrorCode, ProtocolError
from protocol.validation import check_text
from voiceserver.audio import AudioFormat, OutputStage, make_output
from voiceserver.audio.cartesia_files import Mp3FileEncoder, WavFileEncoder
from voiceserver.cartesia_voices import CartesiaVoices
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
    read_json_object,
    request_id_of,
    runtime_of,
    shutting_down,
    text_pieces,
)
from voiceserver.logs import Throttled
from voiceserver.params import resolve_params
from voiceserver.runtime import Runtime
from voiceserver.session.output import ContextOutput
from voiceserver.session.utterance import Utterance, UtteranceError

log = logging.getLogger(__name__)
notes = Throttled(log)

DEFAULT_PAGE = 10
MAX_PAGE = 100
"""Voices one ``GET /voices`` page holds (``limit``), as Cartesia's."""
_NO_AUDIO = np.zeros(0, np.float32)


@dataclass(frozen=True)
class CartesiaJob:
    """One checked request: what to say, how, and in which file."""

    text: str
    params: SynthParams
    sample_rate: int
    container: str
    encoding: str | None
    bit_rate: int
    timestamps: bool
    context_id: str | None

    def build_stage(self, input_rate: int) -> OutputStage:
        rate = self.sample_rate
        if self.container == "mp3":
            return OutputStage(Mp3FileEncoder(rate, self.bit_rate), input_rate)
        assert self.encoding is not None
        if self.container == "wav":
            return OutputStage(WavFileEncoder(self.encoding, rate), input_rate)
        return make_output(AudioFormat(self.encoding, rate), input_rate)


def parse_job(rt: Runtime, body: dict[str, Any], *, sse: bool) -> CartesiaJob:
    """A request body checked against what the served model can do; ApiError naming the
    field otherwise."""
    try:
        request = convert_request(body)
        text = _transcript(rt, request)
        fmt = request.output_format
        if fmt is None:
            raise _missing("output_format")
        if sse and fmt.container != "raw":
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_VALUE,
                f"`output_format.container`: unsupported value {fmt.container!r} for SSE;"
                " allowed: 'raw' (wav and mp3 are offered by POST /tts/bytes)",
                param="output_format.container",
            )
        if fmt.sample_rate is None:
            raise _missing("output_format.sample_rate")
        if fmt.container != "mp3" and fmt.encoding is None:
            raise _missing("output_format.encoding")
        voice = lookup_voice(CartesiaVoices(rt), request)
        speed = requested_speed(request)
    except ProtocolError as err:
        raise ApiError(status_of(err.code), err.message, param=err.param, code=err.code) from None
    warnings: list[str] = []
    if ignored := ignored_fields(request):
        warnings.append(f"no equivalent here, ignored: {', '.join(ignored)}")
    try:
        params = resolve_params(
            rt,
            model=served_model(request.model_id),
            voice=voice,
            language=request.language or request.locale,
            speed=1.0 if speed is None else speed,
            warnings=warnings,
        )
    except ModelInputError as err:
        raise ApiError(status_of(err.code), str(err), param=err.param, code=err.code) from None
    for warning in warnings:
        notes.log(logging.INFO, warning.split(":", 1)[0], "Cartesia request: %s", warning)
    return CartesiaJob(
        text,
        params,
        fmt.sample_rate,
        fmt.container,
        fmt.encoding,
        fmt.bit_rate or DEFAULT_MP3_BIT_RATE,
        sse and request.add_timestamps,
        request.context_id,
    )


def _transcript(rt: Runtime, request: CartesiaRequest) -> str:
    text = request.transcript
    if text is None:
        raise _missing("transcript")
    if not text.strip():
        raise ProtocolError(
            ErrorCode.INVALID_FIELD,
            "`transcript`: must contain text to speak, got an empty string",
            param="transcript",
        )
    limit = rt.server.limits.max_text_chars
    if len(text) > limit:
        raise ProtocolError(
            ErrorCode.TEXT_TOO_LONG,
            f"`transcript`: is {len(text)} characters long; at most {limit}",
            param="transcript",
        )
    check_text(text, "transcript")
    return text


def _missing(field: str) -> ProtocolError:
    return ProtocolError(ErrorCode.MISSING_FIELD, f"missing required field `{field}`", param=field)


class CartesiaStream:
    """One request's audio: an engine context whose PCM becomes one of Cartesia's files
    (raw in any encoding, wav, mp3), its words timed when ``timestamps`` asks.
    ``close()`` frees the engine slot and the encoder at any point; it is idempotent."""

    endpoint = "http"

    def __init__(self, rt: Runtime, job: CartesiaJob, client: ClientId | None = None) -> None:
        self.rt = rt
        self.job = job
        self.client = client
        self.media_type = ""
        self.utterance: Utterance | None = None
        self._pieces = text_pieces(job.text, rt.model.capabilities.max_context_chars)
        """The transcript in pieces one engine context speaks whole, one after another."""
        self.offset_s = 0.0
        """Audio seconds of the pieces before the current one (its word times start there)."""
        self._output: ContextOutput | None = None
        self._events: AsyncIterator[AudioChunk] | None = None
        self._first: AudioChunk | None = None
        self._closed = False

    async def start(self) -> None:
        """Open the engine context and wait for its first audio; ApiError when the
        engine refuses the request."""
        rate = self.rt.model.capabilities.sample_rate
        # Opening a codec and muxer is codec work: off the loop.
        stage = await asyncio.wrap_future(self.rt.encode_pool.submit(self.job.build_stage, rate))
        self.media_type = stage.content_type
        self._output = ContextOutput(stage, self.rt.encode_pool)
        try:
            if self._closed:  # closed while the stage was being built
                raise ClientGone
            self._first = await self._speak(0)
        except BaseException:
            self.close()
            raise

    async def _speak(self, index: int) -> AudioChunk:
        """Open piece ``index``'s engine context; its first chunk."""
        if self.utterance is not None:
            self.offset_s += self.utterance.audio_s
        try:
            self.utterance = Utterance(
                self.rt,
                self.job.params,
                endpoint=self.endpoint,
                client=self.client,
                word_timestamps=self.job.timestamps,
            )
        except Overloaded as exc:
            raise ApiError(
                exc.status, f"{exc}", code=exc.code, retry_after=exc.retry_after_s
            ) from None
        self._events = self.utterance.events()
        self.utterance.append(self._pieces[index])
        self.utterance.end()
        try:
            return await anext(self._events)
        except UtteranceError as err:
            raise from_engine_failure(err.code, err.message, err.param) from None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The file's bytes as they are encoded, ending with the file's end; ApiError if
        the engine fails midway."""
        assert self._events is not None and self._output is not None, "start() first"
        chunk, piece = self._first, 0
        try:
            while chunk is not None:
                data = b"".join(await self._output.feed(chunk.pcm))
                if data:
                    yield data
                if chunk.final and piece + 1 < len(self._pieces):
                    piece += 1
                    chunk = await self._speak(piece)
                    continue
                chunk = None if chunk.final else await anext(self._events, None)
            tail = b"".join(await self._output.feed(_NO_AUDIO, final=True))
        except UtteranceError as err:
            raise from_engine_failure(err.code, err.message, err.param) from None
        if tail:
            yield tail

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.utterance is not None:
            self.utterance.cancel()  # no-op once the context finished
        if self._output is not None:
            self._output.close()


def error_response(err: ApiError, request_id: str, rt: Runtime) -> JSONResponse:
    """Cartesia's error object with the status; the metrics count it as HTTP's."""
    code = str(err.code or f"http_{err.status}")
    rt.metrics.error("http", code)
    headers = {"x-request-id": request_id}
    if err.retry_after is not None:
        headers["retry-after"] = str(err.retry_after)
    body = http_error_body(code, err.message, request_id)
    return JSONResponse(body, status_code=err.status, headers=headers)


async def _start(request: Request, *, sse: bool) -> tuple[CartesiaStream, RequestGuard] | Response:
    """Check, parse and start one request; the stream and its guard, or the error."""
    request_id = request_id_of(request)
    rt = runtime_of(request)
    guard = RequestGuard(request, rt.lifecycle)
    try:
        check_auth(request, rt.server.api_keys)
        if rt.lifecycle.draining:
            raise shutting_down()
        job = parse_job(rt, await read_json_object(request), sse=sse)
        stream = CartesiaStream(rt, job, request_client(request))
        await cancel_on_disconnect(request, stream.start())
    except ApiError as err:
        guard.release()
        return error_response(err, request_id, rt)
    except ClientGone:
        guard.release()
        return client_gone_response()
    except BaseException:
        guard.release()
        raise
    return stream, guard


async def tts_bytes(request: Request) -> Response:
    """POST /tts/bytes: the audio as one streamed body."""
    started = await _start(request, sse=False)
    if isinstance(started, Response):
        return started
    stream, guard = started
    headers = {"x-request-id": request_id_of(request), "cache-control": "no-store"}
    return SpeechResponse(stream, stream.chunks(), stream.media_type, headers, guard)


async def tts_sse(request: Request) -> Response:
    """POST /tts/sse: ``chunk`` events (and ``timestamps`` when asked), then ``done``."""
    started = await _start(request, sse=True)
    if isinstance(started, Response):
        return started
    stream, guard = started
    request_id = request_id_of(request)
    headers = {"x-request-id": request_id, "cache-control": "no-store", "x-accel-buffering": "no"}
    return SpeechResponse(
        stream, _sse_events(stream, request_id), "text/event-stream", headers, guard
    )


def _event(kind: str, payload: str) -> bytes:
    return f"event: {kind}\ndata: {payload}\n\n".encode()


async def _sse_events(stream: CartesiaStream, request_id: str) -> AsyncIterator[bytes]:
    context_id = stream.job.context_id or request_id
    try:
        async for data in stream.chunks():
            timed = _timestamps(stream, context_id)
            if timed is not None:
                yield timed
            chunk = Chunk(
                data=base64.b64encode(data).decode("ascii"),
                done=False,
                status_code=206,
                step_time=0.0,
                context_id=context_id,
            )
            yield _event("chunk", encode_server(chunk))
    except ApiError as err:
        code = ErrorCode(err.code) if err.code in ErrorCode.__members__.values() else None
        failure = ProtocolError(
            code or ErrorCode.INTERNAL_ERROR, err.message, context_id=context_id
        )
        yield _event("error", encode_server(error_event(failure, request_id)))
        return
    timed = _timestamps(stream, context_id)
    if timed is not None:
        yield timed
    yield _event("done", encode_server(Done(context_id=context_id)))


def _timestamps(stream: CartesiaStream, context_id: str) -> bytes | None:
    utterance = stream.utterance
    if utterance is None or not utterance.aligns_words:
        return None
    words = utterance.take_words()
    if not words:
        return None
    message = TimestampsMessage(
        word_timestamps=WordTimestamps(
            words=[w.text for w in words],
            start=[stream.offset_s + w.start_s for w in words],
            end=[stream.offset_s + w.end_s for w in words],
        ),
        done=False,
        status_code=206,
        context_id=context_id,
    )
    return _event("timestamps", encode_server(message))


# -- voices ---------------------------------------------------------------------------


async def list_voices(request: Request) -> Response:
    """GET /voices: Cartesia's cursor page ``{data, has_more, next_page}``; ``limit``
    (1..100, default 10), ``starting_after`` / ``ending_before`` (a voice id), ``q`` (a
    part of the name, description or id). Filters that need metadata the voices do not
    have (``gender``) match nothing; ``is_owner=true`` lists the uploaded voices."""
    request_id = request_id_of(request)
    rt = runtime_of(request)
    try:
        check_auth(request, rt.server.api_keys)
        limit = _limit(request.query_params.get("limit"))
    except ApiError as err:
        return error_response(err, request_id, rt)
    query = request.query_params
    voices = CartesiaVoices(rt).all()
    if q := query.get("q", "").strip().lower():
        voices = [
            v for v in voices if q in v.name.lower() or q in v.description.lower() or q in v.id
        ]
    if query.get("is_owner") in ("true", "false"):
        voices = [v for v in voices if v.uploaded == (query["is_owner"] == "true")]
    if query.get("gender"):
        voices = []
    ids = [v.id for v in voices]
    after, before = query.get("starting_after"), query.get("ending_before")
    if before:
        end = ids.index(before) if before in ids else len(ids)
        start = max(0, end - limit)
    else:
        start = ids.index(after) + 1 if after in ids else (len(ids) if after else 0)
        end = start + limit
    page = voices[start:end]
    more = end < len(voices) if not before else start > 0
    body = {
        "data": [v.entry() for v in page],
        "has_more": more,
        "next_page": page[-1].id if page and more and not before else None,
    }
    return JSONResponse(body, headers={"x-request-id": request_id})


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_PAGE
    if raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_PAGE:
        return int(raw)
    raise ApiError(
        400,
        f"`limit`: must be a whole number from 1 to {MAX_PAGE}, got {raw[:20]!r}",
        param="limit",
        code=ErrorCode.INVALID_FIELD,
    )


async def get_voice(request: Request) -> Response:
    """GET /voices/{id}: one voice by its id (or name), or 404."""
    request_id = request_id_of(request)
    rt = runtime_of(request)
    voice_id = request.path_params["voice_id"]
    try:
        check_auth(request, rt.server.api_keys)
        voice = CartesiaVoices(rt).find(voice_id)
        if voice is None:
            raise ApiError(
                404,
                f"no voice {voice_id[:80]!r}; GET /voices lists them",
                param="id",
                code=ErrorCode.UNKNOWN_VOICE,
            )
    except ApiError as err:
        return error_response(err, request_id, rt)
    return JSONResponse(voice.entry(), headers={"x-request-id": request_id})
