"""/v1/audio/voices: list the model's voices, upload (clone) and delete named voices.

Shapes follow vllm-omni (``list_voices``/``upload_voice``/``delete_voice`` in
its ``api_server.py``) and OpenAI's custom voices, so clients of either work:

- ``GET``: ``{"voices": [sorted names, built-in and uploaded], "uploaded_voices":
  [{name, consent, created_at, file_size, mime_type, embedding_source,
  x_vector_only, error?}], "default_voice", "data": [{name, language, description,
  uploaded}, built-in first]}``, a page at a time in OpenAI's list style: ``limit``
  (1 to 1000, default 100) voices after the voice named ``after``, with ``object:
  "list"``, ``has_more``, ``first_id`` and ``last_id`` (pass it as ``after`` for the
  next page). The entries are summaries: the long fields (``ref_text``,
  ``speaker_description``) are in ``GET /v1/audio/voices/{name}``, which answers one
  voice's listing entry whole (``object: "audio.voice"``), or 404.
- ``POST``, ``multipart/form-data`` as both send it: ``audio_sample`` (the
  file), ``name``, ``consent`` (OpenAI's consent id; optional here, stored),
  ``ref_text`` (the reference's transcript: the voice then clones in context,
  else from the speaker embedding alone, as in vllm-omni), ``speaker_description``,
  ``x_vector_only`` (alias ``x_vector_only_mode``) to choose explicitly. The
  same fields in a JSON object work too, with ``audio_sample`` (or ``ref_audio``)
  as base64 or a ``data:`` URL. The answer joins both APIs' shapes:
  ``{"success": true, "voice": {...listing entry}, "id", "object": "audio.voice",
  "name", "created_at"}``.
- ``DELETE /v1/audio/voices/{name}``: ``{"success": true, "id", "object":
  "audio.voice", "deleted": true, "message"}``; an unknown name is a 404.

The voice is computed once at upload (``ModelRunner.clone_voice``: speaker
embedding, reference codes) and stored (``voiceserver.voices.VoiceStore``), so
requests naming it skip the reference audio entirely. Cloning runs on the prepare
workers, clients taking turns (``voiceserver.cloning``): it must not stall the event
loop, and on the engine thread it would stall every live stream for as long as the
encoders run. A client has at most ``Limits.max_client_media_jobs`` clones (and
fetches) running (more: 429 naming ``audio_sample``); ``ref_text`` holds at most
``REF_TEXT_MAX_LEN`` characters, as everywhere; the store holds at most
``Limits.max_voice_store_bytes`` (a full store answers 413: delete voices first).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from models.base import ModelInputError
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import REF_TEXT_MAX_LEN
from protocol.validation import check_text
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
from voiceserver.http.guard import ClientGone, client_gone_response
from voiceserver.http.speech import read_body, read_json_object, request_id_of, runtime_of
from voiceserver.runtime import Runtime
from voiceserver.voices import StoredVoice, StoreFull, VoiceExists, VoiceRecord

log = logging.getLogger(__name__)

AUDIO_FIELD = "audio_sample"
MAX_NOTE_CHARS = 1000
"""Longest ``consent`` / ``speaker_description``."""
DEFAULT_PAGE = 100
MAX_PAGE = 1000
"""Voices one listing page holds (``limit``)."""
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


async def list_voices(request: Request) -> Response:
    request_id = request_id_of(request)
    rt = runtime_of(request)
    try:
        check_auth(request, rt.server.api_keys)
        limit, after = _page_params(request)
    except ApiError as err:
        return error_response(err, request_id, rt.metrics, "http")
    caps = rt.model.capabilities
    builtin = list(caps.voices)
    uploaded = rt.voices.list()  # sorted by lower-case name
    if after is None:
        start = 0
    else:
        known = [v.name.lower() for v in builtin]
        key = after.lower()
        if key in known:
            start = known.index(key) + 1
        else:  # an uploaded name (perhaps deleted since): those after it
            start = len(builtin) + sum(1 for v in uploaded if v.record.name.lower() <= key)
    everything: list[Any] = [*builtin, *uploaded]
    page = everything[start : start + limit]
    page_builtin = [v for v in page if not isinstance(v, StoredVoice)]
    page_uploaded = [v for v in page if isinstance(v, StoredVoice)]
    data = [_builtin_entry(v) for v in page_builtin]
    data += [_uploaded_data(v, caps.languages[0]) for v in page_uploaded]
    names = [entry["name"] for entry in data]
    return JSONResponse(
        {
            "object": "list",
            "voices": sorted(names),
            "uploaded_voices": [voice_entry(v, summary=True) for v in page_uploaded],
            "default_voice": caps.default_voice,
            "data": data,
            "first_id": names[0] if names else None,
            "last_id": names[-1] if names else None,
            "has_more": start + limit < len(everything),
        },
        headers={"x-request-id": request_id},
    )


async def get_voice(request: Request) -> Response:
    """GET /v1/audio/voices/{name}: one voice, every field."""
    request_id = request_id_of(request)
    rt = runtime_of(request)
    name = request.path_params["name"]
    try:
        check_auth(request, rt.server.api_keys)
        caps = rt.model.capabilities
        for voice in caps.voices:
            if voice.name.lower() == name.lower():
                body = _builtin_entry(voice)
                break
        else:
            stored = rt.voices.find(name)
            if stored is None:
                raise ApiError(
                    404,
                    f"no voice called {name[:80]!r}; list them with GET /v1/audio/voices",
                    param="name",
                    code=ErrorCode.UNKNOWN_VOICE,
                )
            body = {**_uploaded_data(stored, caps.languages[0]), **voice_entry(stored)}
    except ApiError as err:
        return error_response(err, request_id, rt.metrics, "http")
    return JSONResponse(
        {"id": body["name"], "object": "audio.voice", **body},
        headers={"x-request-id": request_id},
    )


def _page_params(request: Request) -> tuple[int, str | None]:
    raw = request.query_params.get("limit")
    limit = DEFAULT_PAGE
    if raw is not None:
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_PAGE):
            raise invalid("limit", f"must be a whole number from 1 to {MAX_PAGE}, got {raw[:20]!r}")
        limit = int(raw)
    after = request.query_params.get("after") or None
    if after is not None and len(after) > 256:
        raise invalid("after", "must be a voice name (the last_id of the previous page)")
    return limit, after


def _builtin_entry(voice: Any) -> dict[str, Any]:
    return {
        "name": voice.name,
        "language": voice.language,
        "description": voice.description,
        "uploaded": False,
    }


def _uploaded_data(stored: StoredVoice, language: str) -> dict[str, Any]:
    return {
        "name": stored.record.name,
        "language": language,
        "description": stored.record.description or "uploaded voice",
        "uploaded": True,
    }


async def create_voice(request: Request) -> Response:
    request_id = request_id_of(request)
    rt = runtime_of(request)
    try:
        check_auth(request, rt.server.api_keys)
        upload = await read_upload(request)
        stored = await clone_and_store(rt, upload, request_client(request))
    except ApiError as err:
        return error_response(err, request_id, rt.metrics, "http")
    except ClientGone:
        return client_gone_response()
    record = stored.record
    return JSONResponse(
        {
            "success": True,
            "voice": voice_entry(stored),
            "id": record.name,
            "object": "audio.voice",
            "name": record.name,
            "created_at": record.created_at,
        },
        headers={"x-request-id": request_id},
    )


async def delete_voice(request: Request) -> Response:
    request_id = request_id_of(request)
    rt = runtime_of(request)
    name = request.path_params["name"]
    try:
        check_auth(request, rt.server.api_keys)
        if rt.voices.is_builtin(name):
            raise invalid(
                "name",
                f"{name!r} is a built-in voice of this model and cannot be deleted",
                ErrorCode.UNSUPPORTED_VALUE,
            )
        try:
            removed = await asyncio.to_thread(rt.voices.remove, name)
        except OSError as exc:
            log.exception("deleting voice %r failed", name)
            raise ApiError(
                500, f"could not delete voice {name!r}: {exc}", code=ErrorCode.INTERNAL_ERROR
            ) from None
        if removed is None:
            uploaded = ", ".join(rt.voices.names()) or "none"
            raise ApiError(
                404,
                f"voice {name!r} is not an uploaded voice of this model; uploaded: {uploaded}",
                param="name",
                code=ErrorCode.UNKNOWN_VOICE,
            )
    except ApiError as err:
        return error_response(err, request_id, rt.metrics, "http")
    shown = removed.record.name
    return JSONResponse(
        {
            "success": True,
            "id": shown,
            "object": "audio.voice",
            "deleted": True,
            "message": f"Voice '{shown}' deleted",
        },
        headers={"x-request-id": request_id},
    )


def voice_entry(stored: StoredVoice, summary: bool = False) -> dict[str, Any]:
    """One ``uploaded_voices`` item (vllm-omni's keys, plus ``error`` when broken);
    a ``summary`` leaves out the long fields (``ref_text``, ``speaker_description``)."""
    record = stored.record
    entry: dict[str, Any] = {
        "name": record.name,
        "consent": record.consent or "",
        "created_at": record.created_at,
        "file_size": record.file_size,
        "mime_type": record.mime_type or "",
        "embedding_source": "audio",
        "x_vector_only": record.x_vector_only,
    }
    if record.ref_text and not summary:
        entry["ref_text"] = record.ref_text
    if record.description and not summary:
        entry["speaker_description"] = record.description
    if stored.error is not None:
        entry["error"] = stored.error
    return entry


# -- the upload ---------------------------------------------------------------------


@dataclass(frozen=True)
class Upload:
    """One upload's fields, types checked (values not yet: the store and model do)."""

    name: object
    audio: bytes
    mime_type: str | None
    ref_text: str | None
    consent: str | None
    description: str | None
    x_vector_only: bool | None


async def read_upload(request: Request) -> Upload:
    """The request's fields from a multipart form or a JSON object; ApiError naming
    the field otherwise."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        form = await _read_form(request)
        try:
            fields = await _form_fields(form)
        finally:
            await form.close()
    elif kind in ("application/json", ""):
        fields = _json_fields(await read_json_object(request))
    else:
        raise ApiError(
            400,
            f"unsupported content-type {kind!r}: send multipart/form-data (an audio_sample"
            " file and a name) or a JSON object with base64 audio_sample",
            code=ErrorCode.INVALID_FIELD,
        )
    return upload_of(fields)


def upload_from_json(body: dict[str, Any]) -> Upload:
    """An upload sent as a JSON object (base64 ``audio_sample``), checked as the POST
    body is; ApiError naming the field otherwise. The vllm socket's ``voice.add`` too."""
    return upload_of(_json_fields(body))


def upload_of(fields: dict[str, Any]) -> Upload:
    """The upload's fields checked: texts within their limits, the audio present."""
    texts = {
        key: _text(fields, key, limit)
        for key, limit in (
            ("ref_text", REF_TEXT_MAX_LEN),
            ("consent", MAX_NOTE_CHARS),
            ("speaker_description", MAX_NOTE_CHARS),
        )
    }
    audio, mime_type = fields.get(AUDIO_FIELD, (None, None))
    if not audio:
        raise ApiError(
            400,
            f"{AUDIO_FIELD}: required (an audio file of the voice to clone)"
            if audio is None
            else f"{AUDIO_FIELD}: the file is empty",
            param=AUDIO_FIELD,
            code=ErrorCode.MISSING_FIELD,
        )
    return Upload(
        name=fields.get("name"),
        audio=audio,
        mime_type=mime_type,
        ref_text=texts["ref_text"] or None,
        consent=texts["consent"],
        description=texts["speaker_description"],
        x_vector_only=_flag(fields),
    )


async def clone_and_store(
    rt: Runtime, upload: Upload, client: ClientId | None = None
) -> StoredVoice:
    store = rt.voices
    max_bytes = rt.server.limits.max_voice_store_bytes
    x_only = upload.x_vector_only if upload.x_vector_only is not None else not upload.ref_text
    try:
        name = store.check_name(upload.name)
        store.check_room(max_bytes)
        options = {"ref_text": upload.ref_text, "x_vector_only": x_only}
        cloned = await clone_voice(rt, client, upload.audio, options, AUDIO_FIELD)
        record = VoiceRecord(
            name=name,
            created_at=int(time.time()),
            consent=upload.consent,
            description=upload.description,
            ref_text=upload.ref_text if not x_only else None,
            x_vector_only=x_only,
            mime_type=upload.mime_type,
            file_size=len(upload.audio),
        )
        # Checks the name and the room again: another upload may have taken either.
        return await asyncio.to_thread(store.add, record, cloned, max_bytes)
    except VoiceExists as err:
        raise ApiError(409, str(err), param=err.param, code=err.code) from None
    except StoreFull as err:
        raise ApiError(413, str(err), param=err.param, code=err.code) from None
    except ModelInputError as err:
        raise _upload_error(err) from None
    except OSError as exc:
        log.exception("storing voice %r failed", upload.name)
        raise ApiError(
            500, f"could not store the voice: {exc}", code=ErrorCode.INTERNAL_ERROR
        ) from None


def _upload_error(err: ModelInputError) -> ApiError:
    """A model error names its own field (``ref_audio``); the client sent ``audio_sample``."""
    if err.param != "ref_audio":
        return from_model_error(err)
    message = str(err).removeprefix("ref_audio:").strip()
    return ApiError(400, f"{AUDIO_FIELD}: {message}", param=AUDIO_FIELD, code=err.code)


async def _read_form(request: Request) -> FormData:
    """The multipart form, read within the same size and time bounds as a JSON body."""
    body = await read_body(request)

    async def replay() -> AsyncGenerator[bytes, None]:
        yield body

    try:
        return await MultiPartParser(request.headers, replay(), max_files=1, max_fields=16).parse()
    except MultiPartException as exc:
        raise ApiError(
            400, f"malformed multipart body: {exc.message}", code=ErrorCode.INVALID_FIELD
        ) from None


async def _form_fields(form: FormData) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in form.multi_items():
        if key == AUDIO_FIELD:
            if not isinstance(value, UploadFile):
                raise invalid(AUDIO_FIELD, "must be a file part (curl: -F audio_sample=@voice.wav)")
            fields[key] = (await value.read(), value.content_type or None)
        elif isinstance(value, UploadFile):
            raise invalid(key, "must be text, got a file")
        else:
            fields[key] = value
    if "x_vector_only_mode" in fields and "x_vector_only" not in fields:
        fields["x_vector_only"] = fields["x_vector_only_mode"]
    return fields


def _json_fields(body: dict[str, Any]) -> dict[str, Any]:
    fields = {k: v for k, v in body.items() if v is not None}
    if "x_vector_only_mode" in fields and "x_vector_only" not in fields:
        fields["x_vector_only"] = fields["x_vector_only_mode"]
    audio = fields.pop(AUDIO_FIELD, None)
    if audio is None:
        audio = fields.pop("ref_audio", None)
    if audio is not None:
        fields[AUDIO_FIELD] = _decode_base64(audio)
    return fields


def _decode_base64(value: object) -> tuple[bytes, str | None]:
    if not isinstance(value, str):
        raise invalid(AUDIO_FIELD, "must be a string of base64-encoded audio or a data: URL")
    mime_type = None
    if value.startswith("data:"):
        head, _, value = value.partition(",")
        mime_type = head[5:].split(";")[0] or None
    try:
        return base64.b64decode(value, validate=True), mime_type
    except (binascii.Error, ValueError):
        raise invalid(AUDIO_FIELD, "is not valid base64") from None


def _text(fields: dict[str, Any], key: str, limit: int) -> str | None:
    value = fields.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(key, "must be a string")
    if len(value) > limit:
        raise invalid(key, f"at most {limit} characters", ErrorCode.TEXT_TOO_LONG)
    try:
        check_text(value, key)
    except ProtocolError as err:
        raise ApiError(400, err.message, param=key, code=err.code) from None
    return value


def _flag(fields: dict[str, Any]) -> bool | None:
    value = fields.get("x_vector_only")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise invalid("x_vector_only", "must be true or false")
