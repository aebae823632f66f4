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
Items run concurrently on the engine; a bad item fails alone. The batch as a
whole fails (OpenAI-shaped error) only for a bad body, a bad ``items``
list, an unknown ``model`` (404) or a missing key (401). A client that leaves
cancels every item at once (their engine contexts are freed; nothing is kept).
Every item is a whole file with its true length in its header (see
``voiceserver.audio.whole_file``; ``aac`` items are M4A, ``audio/mp4``).
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from models.base import ModelInputError
from protocol.errors import ErrorCode
from voiceserver.audio.containers import media_type
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
    cancel_on_disconnect,
    client_gone_response,
)
from voiceserver.http.speech import (
    load_ref_audio,
    normalize_aliases,
    parse_speech_request,
    read_json_object,
    request_id_of,
    runtime_of,
    shutting_down,
    synthesize,
)
from voiceserver.names import is_openai_model
from voiceserver.runtime import Runtime

DEFAULT_BATCH_FORMAT = "wav"
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


def merge_item(defaults: Mapping[str, Any], item: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level fields overridden by the item's non-null ones."""
    merged = {k: v for k, v in normalize_aliases(defaults).items() if k not in _IGNORED_TOP_LEVEL}
    merged.update({k: v for k, v in normalize_aliases(item).items() if v is not None})
    for key in ("stream", "stream_format"):
        merged.pop(key, None)
    return merged


async def _run_item(
    rt: Runtime, index: int, defaults: Mapping[str, Any], item: Mapping[str, Any]
) -> dict[str, Any]:
    try:
        merged = await load_ref_audio(rt, merge_item(defaults, item))
        request = parse_speech_request(rt, merged, DEFAULT_BATCH_FORMAT, whole_file=True)
        audio, usage = await synthesize(rt, request)
    except ApiError as err:
        return {
            "index": index,
            "status": "error",
            "audio_data": None,
            "media_type": None,
            "error": err.message,
            "param": err.param,
            "code": err.code,
            "usage": None,
        }
    return {
        "index": index,
        "status": "success",
        "audio_data": base64.b64encode(audio).decode("ascii"),
        "media_type": media_type(request.response_format, whole=True),
        "error": None,
        "param": None,
        "code": None,
        "usage": usage,
    }


async def speech_batch(request: Request) -> Response:
    request_id = request_id_of(request)
    rt = runtime_of(request)
    guard = RequestGuard(request, rt.lifecycle)
    try:
        return await _batch(request, request_id, rt)
    except ClientGone:
        return client_gone_response()
    finally:
        guard.release()


async def _batch(request: Request, request_id: str, rt: Runtime) -> Response:
    try:
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
    except ApiError as err:
        return error_response(err, request_id, rt.metrics, "batch")
    results = await cancel_on_disconnect(
        request, asyncio.gather(*(_run_item(rt, i, body, item) for i, item in enumerate(items)))
    )
    succeeded = sum(1 for r in results if r["status"] == "success")
    return JSONResponse(
        {
            "id": f"speech-batch-{uuid.uuid4().hex}",
            "results": results,
            "total": len(results),
            "succeeded": succeeded,
            "failed": len(results) - succeeded,
        },
        headers={"x-request-id": request_id},
    )
