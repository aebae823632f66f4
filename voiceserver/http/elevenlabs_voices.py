"""ElevenLabs' voice listing: ``GET /v1/voices``, ``GET /v2/voices`` (paged, searched)
and ``GET /v1/voices/{voice_id}``.

A voice id is a voice's name: the served model's built-in voices (``category:
"premade"``) and those uploaded with ``POST /v1/audio/voices`` (``category:
"cloned"``). Each entry has ElevenLabs' fields that clients read (``voice_id``,
``name``, ``category``, ``description``, ``labels`` with the voice's ``language``,
``preview_url`` null, ``settings`` null, empty tier and model lists); an uploaded voice
also has ``created_at_unix``.

``/v2/voices`` pages with ``page_size`` (1-100, default 10) and ``next_page_token``
(the last id of the previous page), and filters by ``search`` (in name and
description), ``category`` and ``voice_ids``; ``sort`` is by ``name`` (the only
order here) in ``sort_direction``. Its other filters are accepted and match every
voice (they name properties these voices do not have).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from protocol.compat_elevenlabs import Name, convert_query
from protocol.errors import ErrorCode, ProtocolError
from voiceserver.http.elevenlabs import error_response
from voiceserver.http.errors import ApiError, check_auth
from voiceserver.http.speech import request_id_of, runtime_of
from voiceserver.runtime import Runtime
from voiceserver.voices import StoredVoice


class ListQuery(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``GET /v1/voices``."""

    show_legacy: bool | None = None


class VoiceQuery(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``GET /v1/voices/{voice_id}``."""

    with_settings: bool | None = None


class SearchQuery(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``GET /v2/voices`` (``voice_ids`` may repeat; read separately)."""

    next_page_token: Name | None = None
    page_size: Annotated[int, Meta(ge=1, le=100)] = 10
    search: Name | None = None
    sort: Literal["name", "created_at_unix"] | None = None
    sort_direction: Literal["asc", "desc"] | None = None
    category: Name | None = None
    voice_type: Name | None = None
    fine_tuning_state: Name | None = None
    collection_id: Name | None = None
    include_total_count: bool | None = None
    gender: Name | None = None
    age: Name | None = None
    language: Name | None = None
    accent: Name | None = None
    use_cases: Name | None = None
    min_notice_period_days: int | None = None
    include_custom_rates: bool | None = None
    include_live_moderated: bool | None = None
    high_quality: bool | None = None


def _entry(name: str, language: str, description: str | None, category: str) -> dict[str, Any]:
    return {
        "voice_id": name,
        "name": name,
        "category": category,
        "description": description,
        "labels": {"language": language},
        "preview_url": None,
        "available_for_tiers": [],
        "settings": None,
        "high_quality_base_model_ids": [],
    }


def all_voices(rt: Runtime) -> list[dict[str, Any]]:
    """Every voice a client may name, built-in first, as ElevenLabs lists voices."""
    caps = rt.model.capabilities
    voices = [_entry(v.name, v.language, v.description, "premade") for v in caps.voices]
    voices += [_uploaded(stored, caps.languages[0]) for stored in rt.voices.list()]
    return voices


def _uploaded(stored: StoredVoice, language: str) -> dict[str, Any]:
    record = stored.record
    entry = _entry(record.name, language, record.description, "cloned")
    entry["created_at_unix"] = record.created_at
    return entry


def _query(request: Request, struct: type[msgspec.Struct], repeated: str = "") -> Any:
    params = {k: v for k, v in request.query_params.items() if k != repeated}
    return convert_query(params, struct)


def _refused(err: ProtocolError) -> ApiError:
    status = 404 if err.code == ErrorCode.UNKNOWN_VOICE else 422
    return ApiError(status, err.message, param=err.param, code=err.code)


async def list_voices(request: Request) -> Response:
    """``GET /v1/voices``: ``{"voices": [...]}``, every voice."""
    request_id = request_id_of(request)
    rt = runtime_of(request)
    try:
        check_auth(request, rt.server.api_keys)
        _query(request, ListQuery)
    except ProtocolError as err:
        return error_response(_refused(err), request_id, rt)
    except ApiError as err:
        return error_response(err, request_id, rt)
    return JSONResponse({"voices": all_voices(rt)}, headers={"x-request-id": request_id})


async def search_voices(request: Request) -> Response:
    """``GET /v2/voices``: a page of voices, ``has_more``, ``total_count`` and
    ``next_page_token``."""
    request_id = request_id_of(request)
    rt = runtime_of(request)
    try:
        check_auth(request, rt.server.api_keys)
        query: SearchQuery = _query(request, SearchQuery, repeated="voice_ids")
    except ProtocolError as err:
        return error_response(_refused(err), request_id, rt)
    except ApiError as err:
        return error_response(err, request_id, rt)
    voices = all_voices(rt)
    ids = {v.lower() for v in request.query_params.getlist("voice_ids")}
    if ids:
        voices = [v for v in voices if v["voice_id"].lower() in ids]
    if query.category is not None:
        voices = [v for v in voices if v["category"] == query.category]
    if query.search:
        term = query.search.lower()
        voices = [
            v
            for v in voices
            if term in v["name"].lower() or term in (v["description"] or "").lower()
        ]
    voices.sort(key=lambda v: v["name"].lower(), reverse=query.sort_direction == "desc")
    start = 0
    if query.next_page_token is not None:
        token = query.next_page_token.lower()
        names = [v["voice_id"].lower() for v in voices]
        start = names.index(token) + 1 if token in names else len(voices)
    page = voices[start : start + query.page_size]
    more = start + query.page_size < len(voices)
    body = {
        "voices": page,
        "has_more": more,
        "total_count": len(voices),
        "next_page_token": page[-1]["voice_id"] if more and page else None,
    }
    return JSONResponse(body, headers={"x-request-id": request_id})


async def get_voice(request: Request) -> Response:
    """``GET /v1/voices/{voice_id}``: one voice, or 404 ``voice_not_found``."""
    request_id = request_id_of(request)
    rt = runtime_of(request)
    voice_id = request.path_params["voice_id"]
    try:
        check_auth(request, rt.server.api_keys)
        _query(request, VoiceQuery)
        for voice in all_voices(rt):
            if voice["voice_id"].lower() == voice_id.lower():
                return JSONResponse(voice, headers={"x-request-id": request_id})
        raise ProtocolError(
            ErrorCode.UNKNOWN_VOICE,
            f"A voice with the voice_id {voice_id[:64]!r} was not found",
            param="voice_id",
        )
    except ProtocolError as err:
        return error_response(_refused(err), request_id, rt)
    except ApiError as err:
        return error_response(err, request_id, rt)
