"""GET /health and GET /v1/models."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from voiceserver.runtime import Runtime


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


async def health(request: Request) -> JSONResponse:
    rt = _runtime(request)
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


async def list_models(request: Request) -> JSONResponse:
    """Every name the model answers to, one entry each (as vLLM lists its served
    names), the first being the primary one; ``root`` is the config name."""
    rt = _runtime(request)
    caps = rt.model.capabilities
    details = {
        "family": caps.family,
        "sample_rate": caps.sample_rate,
        "voices": [v.name for v in caps.voices],
        "languages": list(caps.languages),
        "task_types": list(rt.tasks.tasks),
        "streaming_text": caps.streaming_text,
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
