"""GET /health and GET /v1/models.

``/health`` answers 200 ``{"status": "ok"}`` while the server takes new sessions, and
503 with ``draining`` (shutting down: finishing what it holds) or ``down`` (every
engine process died): what a load balancer places on. With a key it also lists each
engine's figures (up, slots, KV blocks, load).

With API keys configured, ``/v1/models`` (which names the checkpoint) needs a key,
and ``/health`` tells a caller without one only that the server is up
(``{"status": "ok"}``, for load balancers and probes); the model, open sessions and
engine counters go to callers with a key, or to everyone on a server without keys.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voiceserver.engine.door import Engine
from voiceserver.http.errors import ApiError, check_auth, error_response
from voiceserver.http.speech import request_id_of
from voiceserver.params import option_fields
from voiceserver.runtime import Runtime
from voiceserver.transport.auth import key_ok, offered_key


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


async def health(request: Request) -> JSONResponse:
    rt = _runtime(request)
    engines = [_engine_entry(i, e) for i, e in enumerate(rt.engines)]
    live = [e for e in engines if e["up"]]
    # For balancers: 503 while draining (send no new sessions) or with every engine down.
    status = "down" if not live else "draining" if rt.lifecycle.draining else "ok"
    code = 200 if status == "ok" else 503
    if not key_ok(rt.server.api_keys, offered_key(request.headers)):
        return JSONResponse({"status": status}, status_code=code)
    return JSONResponse(
        {
            "status": status,
            "model": rt.model_config.name,
            "sessions": rt.sessions_open,
            "engine": {
                key: sum(e[key] for e in live)
                for key in (
                    "active_contexts",
                    "active_slots",
                    "free_slots",
                    "steps",
                    "vocoder_calls",
                )
            },
            "engines": engines,
        },
        status_code=code,
    )


def _engine_entry(index: int, engine: Engine) -> dict[str, Any]:
    """One engine's figures for /health (``up`` false once its process died)."""
    snap = engine.snapshot()
    return {
        "index": index,
        "up": not engine.lost,
        "pid": getattr(engine, "pid", os.getpid()),
        "device": getattr(engine, "device", "in process"),
        "active_contexts": snap.active_contexts,
        "active_slots": snap.used_slots,
        "free_slots": 0 if engine.lost else snap.free_slots,
        "max_slots": snap.max_slots,
        "kv_blocks_used": snap.kv_blocks_used,
        "kv_blocks_total": snap.kv_blocks_total,
        "steps": snap.steps,
        "vocoder_calls": snap.vocoder_calls,
        "load": round(snap.load, 4),
    }


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
