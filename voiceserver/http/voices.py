"""GET /v1/audio/voices: the voices of the loaded model.

OpenAI has no such listing. vllm-omni answers
``{"voices": [sorted names], "uploaded_voices": [{name, consent, created_at,
file_size, mime_type}, ...]}`` (``list_voices`` in its ``api_server.py``); clients
read ``voices`` and ``uploaded_voices``. We send that shape (nothing can be
uploaded yet, so ``uploaded_voices`` is empty) plus ``default_voice`` and
``data``: each voice's ``name``, ``language`` and ``description``, default first.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voiceserver.http.errors import ApiError, check_auth, error_response
from voiceserver.http.speech import request_id_of, runtime_of


async def list_voices(request: Request) -> Response:
    request_id = request_id_of(request)
    rt = runtime_of(request)
    try:
        check_auth(request, rt.server.api_keys)
    except ApiError as err:
        return error_response(err, request_id)
    caps = rt.model.capabilities
    return JSONResponse(
        {
            "voices": sorted(v.name for v in caps.voices),
            "uploaded_voices": [],
            "default_voice": caps.default_voice,
            "data": [
                {"name": v.name, "language": v.language, "description": v.description}
                for v in caps.voices
            ],
        },
        headers={"x-request-id": request_id},
    )
