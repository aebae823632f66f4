"""Request fields -> validated SynthParams, the same for every endpoint."""

from __future__ import annotations

from typing import Any

from models.base import ModelInputError, SynthParams
from voiceserver.runtime import Runtime
from voiceserver.voices import resolve_voice


def resolve_params(
    rt: Runtime,
    *,
    model: str | None = None,
    voice: str | None = None,
    language: str | None = None,
    speed: float = 1.0,
    instructions: str | None = None,
    extra: dict[str, Any] | None = None,
) -> SynthParams:
    """Fill defaults from the model's capabilities and validate; raises
    ModelInputError naming the field and what is allowed."""
    caps = rt.model.capabilities
    if model is not None and model not in rt.model_names:
        raise ModelInputError(
            f"unknown model {model!r}; this server serves: {', '.join(sorted(rt.model_names))}",
            param="model",
            code="unknown_model",
        )
    voice, extra = resolve_voice(rt.voices, rt.model.runner, voice, dict(extra or {}))
    params = SynthParams(
        voice=voice or caps.default_voice,
        language=language or caps.languages[0],
        speed=speed,
        instructions=instructions,
        extra=extra,
    )
    rt.model.runner.validate(params)
    return params
