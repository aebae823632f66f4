"""POST /v1/audio/speech: OpenAI's speech endpoint, streamed, plus vllm-omni's extras.

docs/http.md is the reference (fields, streaming, whole files, errors). A body is
parsed by ``voiceserver.http.speech_request``; this module runs it: an engine
context whose audio becomes one file's bytes, sent as a chunked body, as SSE
events, or as one whole file (``stream: false``). Headers go out once the first
audio exists, so errors the engine finds while starting still get a proper
status. A client that leaves cancels its context at once; one that stops reading
is dropped after ``Limits.slow_reader_timeout_s``; a body that does not arrive
within ``Limits.http_body_timeout_s`` gets 408.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

import numpy as np
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from protocol.errors import ErrorCode
from voiceserver.audio.containers import media_type
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
)
from voiceserver.http.guard import (
    ClientGone,
    RequestGuard,
    SlowClient,
    cancel_on_disconnect,
    client_gone_response,
    send_within,
)
from voiceserver.http.speech_request import SpeechRequest, load_ref_audio, parse_speech_request
from voiceserver.runtime import Runtime
from voiceserver.session.output import ContextOutput
from voiceserver.session.utterance import Utterance, UtteranceError
from voiceserver.text.segmenter import SegmenterConfig, TextSegmenter

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 << 20
"""Largest request body (vllm-omni caps reference audio at 10 MB)."""
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
        self._pieces = text_pieces(request.text, rt.model.capabilities.max_context_chars)
        """The text in pieces one context speaks whole, spoken one after another."""
        self._utterance: Utterance | None = None
        self._events: AsyncIterator[AudioChunk] | None = None
        self._first: AudioChunk | None = None
        self._samples_before = 0
        """Samples of the pieces before the current one."""
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
            self._first = await self._speak(0)
        except BaseException:
            self.close()
            raise

    async def _speak(self, index: int) -> AudioChunk:
        """Open the engine context of piece ``index``; its first chunk (ApiError when
        the engine refuses or fails it)."""
        if self._utterance is not None:
            self._samples_before += self._utterance.samples
        try:
            utterance = Utterance(
                self.rt, self.request.params, endpoint=self.endpoint, client=self.client
            )
        except Overloaded as exc:
            raise ApiError(
                exc.status, f"{exc}", code=exc.code, retry_after=exc.retry_after_s
            ) from None
        self._utterance = utterance
        self._events = utterance.events()
        utterance.append(self._pieces[index])
        utterance.end()
        try:
            return await anext(self._events)
        except UtteranceError as err:
            raise from_engine_failure(err.code, err.message, err.param) from None

    async def chunks(self, on_samples: Callable[[int], None] | None = None) -> AsyncIterator[bytes]:
        """The file's bytes as they are encoded, ending with the file's end.
        Raises ApiError if the engine fails midway. ``on_samples`` is told how many
        (model-rate) samples each chunk holds before it is encoded, and may raise
        ApiError to stop the file there."""
        assert self._events is not None and self._output is not None, "start() first"
        output, chunk, piece = self._output, self._first, 0
        try:
            while chunk is not None:
                if on_samples is not None:
                    on_samples(len(chunk.pcm))
                data = b"".join(await output.feed(chunk.pcm))
                if data:
                    yield data
                if chunk.final and piece + 1 < len(self._pieces):
                    piece += 1
                    chunk = await self._speak(piece)
                    continue
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
        samples = self._samples_before
        samples += self._utterance.samples if self._utterance is not None else 0
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


def text_pieces(text: str, max_chars: int) -> list[str]:
    """``text`` as it is, or, when the model speaks at most ``max_chars`` in one
    context, in pieces of at most that many characters cut at the last sentence end
    (else clause mark, else space) within each."""
    if not max_chars or len(text) <= max_chars:
        return [text]
    clause = min(max_chars, 40)
    config = SegmenterConfig(
        mode="manual", max_chars=max_chars, first_min_chars=clause, min_clause_chars=clause
    )
    segmenter = TextSegmenter(config)
    segmenter.push(text, 0.0)
    return [segment.text for segment in segmenter.flush()] or [text]


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


class StreamedAudio(Protocol):
    """What :class:`SpeechResponse` needs of a request's audio (OpenAI's, ElevenLabs'
    and Cartesia's HTTP streams)."""

    rt: Runtime
    endpoint: str
    """The metrics label."""

    def close(self) -> None:
        """Free the engine context and the encoder (idempotent)."""


class SpeechResponse(StreamingResponse):
    """A streamed body that frees its engine context however the response ends
    (finished, failed, the client went away, or stopped reading)."""

    def __init__(
        self,
        stream: StreamedAudio,
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
