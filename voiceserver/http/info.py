"""GET /health and GET /v1/models.

With API keys configured, ``/v1/models`` (which names the checkpoint) needs a key,
and ``/health`` tells a caller without one only that the server is up
(``{"status": "ok"}``, for load balancers and probes); the model, open sessions and
engine counters go to callers with a key, or to everyone on a server without keys.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voiceserver.http.errors import ApiError, check_auth, error_response
from voiceserver.http.speech import request_id_of
from voiceserver.params import option_fields
from voiceserver.runtime import Runtime
from voiceserver.transport.auth import key_ok, offered_key


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


async def health(request: Request) -> JSONResponse:
    rt = _runtime(request)
    if not key_ok(rt.server.api_keys, offered_key(request.headers)):
        return JSONResponse({"status": "ok"})
    stats = rt.engine.stats
    return JSONResponse(
        {
            "status": "ok",
            "model": rt.model_config.name,
            "sessions": rt.sessions_open,
            "engine": {
                "active_contexts": stats.active_contexts,
                "active_slots": stats.active_slots,
                "steps": stats.steps,
                "vocoder_calls": stats.vocoder_calls,
            },
        }
    )


async def list_models(request: Request) -> Response:
    """Every name the model answers to, one entry each (as vLLM lists its served
    names), the first being the primary one; ``root`` is the config name, and
    ``option_fields`` the model's options (``voiceserver.params``)."""
    rt = _runtime(request)
    try:
        check_auth(request, rt.server.api_keys)
    except ApiError as err:
        return error_response(err, request_id_of(request), rt.metrics, "http")
    caps = rt.model.capabilities
    details = {
        "family": caps.family,
        "sample_rate": caps.sample_rate,
        "voices": [v.name for v in caps.voices],
        "languages": list(caps.languages),
        "task_types": list(rt.tasks.tasks),
        "streaming_text": caps.streaming_text,
        # What `options` takes on every endpoint, as session.created lists it.
        "option_fields": msgspec.to_builtins(option_fields(caps.request_fields)),
    }
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(rt.started_at),
                    "owned_by": "voiceserver",
                    "root": rt.model_config.name,
                    **details,
                }
                for name in rt.model_names
            ],
        }
    )
