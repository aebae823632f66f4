"""POST /v1/audio/speech/batch: vllm-omni's batch speech endpoint.

Shape (vllm-omni's ``BatchSpeechRequest`` / ``BatchSpeechResponse`` in
``vllm_omni/entrypoints/openai/protocol/audio.py`` and ``create_speech_batch``
in ``serving_speech.py``): the body has ``items`` (at least one; vllm-omni's
default maximum ``tts_batch_max_items`` is 32, ours is ``Limits.max_batch_items``),
each with its own ``input`` and optional overrides of the speech fields; the
top-level fields (``model``, ``voice``/``speaker``, ``instructions``,
``response_format`` (default wav, as in vllm-omni), ``sample_rate``, ``speed``,
``language``, ``task_type``, ``ref_audio``, ``ref_text``, ...) are the defaults.
An item value that is null or absent takes the top-level one.

The answer is ``{id, results: [{index, status: success|error, audio_data
(base64 file), media_type, error (message), usage}], total, succeeded,
failed}``; we add ``param`` and ``code`` to each result (null on success).
It streams: the status and headers go out once the batch is accepted, then each
result in index order as soon as it and those before it are done, then the
counts (``id`` first, the counts last: a JSON object's key order means nothing to
its parsers, vllm-omni's and ``json.loads`` alike). A client reads it as one JSON
body, as before.

Items run concurrently on the engine, at most the client's share of it at once
(``Limits.max_client_share``); an item that finds no room waits for it (up to
``ITEM_WAIT_S``). A bad item fails alone. The batch as a whole fails
(OpenAI-shaped error) only for a bad body, a bad ``items`` list, more than
``Limits.max_batch_text_chars`` characters of input in all (400 ``text_too_long``), an
unknown ``model`` (404) or a missing key (401). Its items together make at most
``Limits.max_batch_audio_bytes`` of audio: an item that would pass it fails alone
(``message_too_big``). A client that leaves cancels every item at once (their
engine contexts are freed; nothing is kept).

A reference given as a string (base64, a ``data:`` URI, a path or a URL), at the
top level or repeated in items, is loaded and cloned once per batch
(``voiceserver.cloning``); every item using it speaks with the cloned voice, as
with a stored voice (``voiceserver.voices.speak_as``). Every item is a whole file
with its true length in its header (see ``voiceserver.audio.whole_file``; ``aac``
items are M4A, ``audio/mp4``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from models.base import ModelInputError
from protocol.errors import ErrorCode
from voiceserver.audio.containers import media_type
from voiceserver.clients import ClientId
from voiceserver.cloning import clone_voice
from voiceserver.http.budget import request_client
from voiceserver.http.errors import (
    ApiError,
    check_auth,
    error_response,
    from_model_error,
    invalid,
)
from voiceserver.http.guard import (
    ClientGone,
    RequestGuard,
    SlowClient,
    client_gone_response,
    send_within,
)
from voiceserver.http.speech import (
    read_json_object,
    request_id_of,
    runtime_of,
    shutting_down,
    synthesize,
)
from voiceserver.http.speech_request import (
    SpeechRequest,
    normalize_aliases,
    parse_speech_request,
    takes_ref_audio,
)
from voiceserver.logs import Throttled
from voiceserver.media import check_shape
from voiceserver.names import is_openai_model
from voiceserver.runtime import Runtime
from voiceserver.voices import speak_as

log = logging.getLogger(__name__)
_refusals = Throttled(log)
"""Lines about clients (a batch reader that stopped reading), at a bounded rate."""

DEFAULT_BATCH_FORMAT = "wav"
ITEM_WAIT_S = 30.0
"""How long an item waits for room on the engine (its client's share, or a free
slot) before it fails alone with the engine's answer."""
_RETRY_S = (0.05, 1.0)
"""First and longest pause between an item's tries to find room."""
# Fields that make no sense per item of a batch (every item is one whole file).
_IGNORED_TOP_LEVEL = ("items", "input", "stream", "stream_format")


def _items(body: Mapping[str, Any], max_items: int) -> list[dict[str, Any]]:
    items = body.get("items")
    if not isinstance(items, list):
        raise ApiError(
            400, "items: required, an array of objects", param="items", code=ErrorCode.MISSING_FIELD
        )
    if not 1 <= len(items) <= max_items:
        raise invalid("items", f"must hold 1 to {max_items} items, got {len(items)}")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise invalid(f"items[{index}]", "must be an object")
    return items


def _check_total_text(items: list[dict[str, Any]], limit: int) -> None:
    total = sum(len(item["input"]) for item in items if isinstance(item.get("input"), str))
    if total > limit:
        raise ApiError(
            400,
            f"items: the batch holds {total} characters of input in all; at most {limit}"
            " (max_batch_text_chars): split it into smaller batches",
            param="items",
            code=ErrorCode.TEXT_TOO_LONG,
        )


def merge_item(defaults: Mapping[str, Any], item: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level fields overridden by the item's non-null ones."""
    merged = {k: v for k, v in normalize_aliases(defaults).items() if k not in _IGNORED_TOP_LEVEL}
    merged.update({k: v for k, v in normalize_aliases(item).items() if v is not None})
    for key in ("stream", "stream_format"):
        merged.pop(key, None)
    return merged


@dataclass
class _Result:
    """One item's JSON object, in pieces of bytes."""

    pieces: list[bytes]
    succeeded: bool


class _AudioBudget:
    """The batch's audio bytes, all items together, against ``max_batch_audio_bytes``.
    An item that fails (the one that would pass the limit among them) gives back what
    it held, so the items still running can finish within the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.spent = 0

    def item(self, index: int) -> _ItemBudget:
        return _ItemBudget(self, index)


class _ItemBudget:
    def __init__(self, batch: _AudioBudget, index: int) -> None:
        self.batch = batch
        self.index = index
        self.held = 0

    def spend(self, size: int) -> None:
        batch = self.batch
        if batch.spent + size > batch.limit:
            raise ApiError(
                413,
                f"items[{self.index}]: the batch's audio passed {batch.limit} bytes, all items"
                " together (max_batch_audio_bytes, counted as 16-bit samples at the"
                " sample_rate asked for); ask for fewer or shorter items, or a lower"
                " sample_rate",
                param="items",
                code=ErrorCode.MESSAGE_TOO_BIG,
            )
        batch.spent += size
        self.held += size

    def refund(self) -> None:
        self.batch.spent -= self.held
        self.held = 0


class _Batch:
    """One accepted batch: its items, the references they share, its bounds."""

    def __init__(
        self, rt: Runtime, client: ClientId | None, body: dict[str, Any], items: list[dict]
    ) -> None:
        self.rt = rt
        self.client = client
        self.body = body
        self.items = items
        self.id = f"speech-batch-{uuid.uuid4().hex}"
        self.budget = _AudioBudget(rt.server.limits.max_batch_audio_bytes)
        self.slots = asyncio.Semaphore(max(1, rt.fleet.share))
        self._voices: dict[tuple[Any, ...], asyncio.Task[Any]] = {}

    async def results(self) -> AsyncIterator[_Result]:
        """Every item's result, in index order (items run concurrently)."""
        tasks = [
            asyncio.ensure_future(self._run(index, item)) for index, item in enumerate(self.items)
        ]
        try:
            for task in tasks:
                yield await task
        finally:
            for task in [*tasks, *self._voices.values()]:
                task.cancel()
            await asyncio.gather(*tasks, *self._voices.values(), return_exceptions=True)

    async def _run(self, index: int, item: Mapping[str, Any]) -> _Result:
        try:
            merged = merge_item(self.body, item)
            check_shape(merged.get("ref_audio"))
            request = parse_speech_request(self.rt, merged, DEFAULT_BATCH_FORMAT, whole_file=True)
            request = await self._with_shared_voice(request)
            audio, usage = await self._synthesize(index, request)
        except ModelInputError as err:
            return _failed(index, from_model_error(err))
        except ApiError as err:
            return _failed(index, err)
        fields = {
            "index": index,
            "status": "success",
            "media_type": media_type(request.response_format, whole=True),
            "error": None,
            "param": None,
            "code": None,
            "usage": usage,
        }
        # The audio goes out as base64 bytes of its own: no JSON encoding (and copy) of
        # megabytes of text; the raw file is freed as soon as it is encoded.
        rest = b"," + _json(fields)[1:]
        return _Result([b'{"audio_data":"', base64.b64encode(audio), b'"', rest], True)

    async def _with_shared_voice(self, request: SpeechRequest) -> SpeechRequest:
        """The request speaking with its reference cloned once per batch, when its
        reference is a string (base64, ``data:``, path or URL)."""
        extra = request.params.extra
        audio = extra.get("ref_audio")
        if not isinstance(audio, str) or not takes_ref_audio(self.rt):
            return request
        options = {
            "ref_text": extra.get("ref_text"),
            "x_vector_only": bool(extra.get("x_vector_only", False)),
        }
        key = (audio, options["ref_text"], options["x_vector_only"])
        task = self._voices.get(key)
        if task is None:
            task = self._voices[key] = asyncio.ensure_future(self._clone(audio, options))
        cloned = await asyncio.shield(task)  # one item's cancel must not cancel the others'
        return replace(request, params=speak_as(self.rt.model.runner, request.params, cloned))

    async def _clone(self, audio: str, options: dict[str, Any]) -> Any:
        data = await self.rt.media.load(audio, self.client, True)
        return await clone_voice(self.rt, self.client, data, options)

    async def _synthesize(self, index: int, request: SpeechRequest) -> tuple[bytes, Any]:
        """One whole file, waiting (up to ``ITEM_WAIT_S``) for room on the engine."""
        pause, waited = _RETRY_S[0], 0.0
        budget = self.budget.item(index)
        async with self.slots:
            while True:
                try:
                    return await synthesize(self.rt, request, "batch", self.client, budget.spend)
                except BaseException as err:
                    budget.refund()
                    if not isinstance(err, ApiError) or err.retry_after is None:
                        raise
                    if waited >= ITEM_WAIT_S:
                        raise
                await asyncio.sleep(pause)
                waited += pause
                pause = min(pause * 2, _RETRY_S[1])


def _failed(index: int, err: ApiError) -> _Result:
    fields = {
        "index": index,
        "status": "error",
        "audio_data": None,
        "media_type": None,
        "error": err.message,
        "param": err.param,
        "code": err.code,
        "usage": None,
    }
    return _Result([_json(fields)], False)


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


async def _body(batch: _Batch) -> AsyncIterator[bytes]:
    yield b'{"id":' + _json(batch.id) + b',"results":['
    succeeded = count = 0
    async for result in batch.results():
        if count:
            yield b","
        for piece in result.pieces:
            yield piece
        count += 1
        succeeded += result.succeeded
        del result
    counts = {"total": count, "succeeded": succeeded, "failed": count - succeeded}
    yield b"]," + _json(counts)[1:]


class BatchResponse(StreamingResponse):
    """The streamed answer; its request stays registered for shutdown until it ends,
    and a client that stops reading is dropped (``Limits.slow_reader_timeout_s``)."""

    def __init__(self, batch: _Batch, request_id: str, guard: RequestGuard) -> None:
        headers = {"x-request-id": request_id, "cache-control": "no-store"}
        super().__init__(_body(batch), media_type="application/json", headers=headers)
        self._rt = batch.rt
        self._guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        deadline = self._rt.server.limits.slow_reader_timeout_s
        try:
            await super().__call__(scope, receive, send_within(scope, send, deadline))
        except SlowClient:
            _refusals.log(
                logging.INFO,
                "slow_reader",
                "dropped a batch client that read nothing for %g s",
                deadline,
            )
            self._rt.metrics.error("batch", str(ErrorCode.SLOW_READER))
        except (ClientDisconnect, OSError):
            pass  # the client left: its items were cancelled
        finally:
            self._guard.release()


async def speech_batch(request: Request) -> Response:
    request_id = request_id_of(request)
    rt = runtime_of(request)
    guard = RequestGuard(request, rt.lifecycle)
    try:
        batch = await _accept(request, rt)
    except ApiError as err:
        guard.release()
        return error_response(err, request_id, rt.metrics, "batch")
    except ClientGone:
        guard.release()
        return client_gone_response()
    except BaseException:
        guard.release()
        raise
    return BatchResponse(batch, request_id, guard)


async def _accept(request: Request, rt: Runtime) -> _Batch:
    """The batch, once its body and key pass; ApiError otherwise."""
    check_auth(request, rt.server.api_keys)
    if rt.lifecycle.draining:
        raise shutting_down()
    body = await read_json_object(request)
    items = _items(body, rt.server.limits.max_batch_items)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model", "must be a string")
    if model is not None and not is_openai_model(model) and model not in rt.model_names:
        raise from_model_error(
            ModelInputError(
                f"unknown model {model!r}; this server serves: " + ", ".join(rt.model_names),
                param="model",
                code=ErrorCode.UNKNOWN_MODEL,
            )
        )
    _check_total_text(items, rt.server.limits.max_batch_text_chars)
    return _Batch(rt, request_client(request), body, items)
