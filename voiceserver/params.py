"""Request fields -> validated SynthParams, the same for every endpoint.

This is the one mapper between what a client sends and what a model takes:
model settings are checked against the fields the served model declares
(``Capabilities.request_fields``: type and range, written once by the model).
Settings a model does not declare are dropped, as a model that does not sample
ignores sampling settings, but only after the checks every server applies to
them (``COMMON_FIELDS``, the protocol's own ranges), so a malformed request is
refused the same way whichever model is served.

The same mapper reads a language in any spelling (``voiceserver.languages``),
checks vllm-omni's ``task_type`` against the loaded variant
(``voiceserver.tasks``), and drops a ``voice`` the variant has no use for
(no named voices: VoiceDesign, Base) with a warning instead of refusing it, as
vllm-omni checks ``voice`` only for CustomVoice; its own example client sends
one with every request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from models.base import ModelInputError, RequestField, SynthParams
from protocol.messages import INT64_MAX
from voiceserver.languages import resolve_language
from voiceserver.runtime import Runtime
from voiceserver.voices import INLINE_VOICE_KEYS, resolve_voice

log = logging.getLogger(__name__)


def resolve_params(
    rt: Runtime,
    *,
    model: str | None = None,
    voice: str | None = None,
    language: str | None = None,
    speed: float = 1.0,
    instructions: str | None = None,
    extra: dict[str, Any] | None = None,
    task_type: str | None = None,
    warnings: list[str] | None = None,
) -> SynthParams:
    """Fill defaults from the model's capabilities and validate; raises
    ModelInputError naming the field and what is allowed.

    ``task_type`` (vllm-omni's CustomVoice | VoiceDesign | Base; None: the
    variant's own) is checked against what the loaded model can do. Things the
    request asked for that are ignored are logged and appended to ``warnings``.
    """
    caps = rt.model.capabilities
    if model is not None and model not in rt.model_names:
        raise ModelInputError(
            f"unknown model {model!r}; this server serves: {', '.join(rt.model_names)}",
            param="model",
            code="unknown_model",
        )
    raw = extra or {}
    extra = model_extras(caps.request_fields, raw)
    stored = voice is not None and rt.voices.find(voice) is not None
    rt.tasks.check(task_type, instructions=instructions, extra=raw, stored_voice=stored)
    inline = any(raw.get(key) is not None for key in INLINE_VOICE_KEYS)
    # On a cloning variant a name may be an uploaded voice: an unknown one stays an error.
    lookup = "Base" in rt.tasks.tasks and not inline
    if voice is not None and not rt.tasks.named_voices and not stored and not lookup:
        if not rt.voices.is_builtin(voice):
            message = (
                f"voice {voice[:64]!r} ignored: the loaded model ({', '.join(rt.tasks.tasks)})"
                " has no named voices"
            )
            log.warning("%s", message)
            if warnings is not None:
                warnings.append(message)
        voice = None
    voice, extra = resolve_voice(rt.voices, rt.model.runner, voice, extra)
    params = SynthParams(
        voice=voice or caps.default_voice,
        language=resolve_language(language, caps.languages),
        speed=speed,
        instructions=instructions,
        extra=extra,
    )
    rt.model.runner.validate(params)
    return params


INT64 = (-INT64_MAX - 1, INT64_MAX)
COMMON_FIELDS = {
    field.name: field
    for field in (
        RequestField("temperature", "number", 0.0, 2.0),
        RequestField("top_k", "integer", 0, INT64[1]),
        RequestField("top_p", "number", 0.0, 1.0, low_exclusive=True),
        RequestField("repetition_penalty", "number", 0.0, 10.0, low_exclusive=True),
        RequestField("seed", "integer", *INT64),
        RequestField("max_new_tokens", "integer", 1, INT64[1]),
        RequestField("speaker_embedding", "numbers"),
        RequestField("ref_text", "string"),
        RequestField("x_vector_only", "boolean"),
        RequestField("streaming_text", "boolean"),
    )
}
"""Protocol-level checks of the settings any client may send, whatever the model."""


def model_extras(fields: Iterable[RequestField], raw: Mapping[str, Any]) -> dict[str, Any]:
    """The model settings among ``raw``, each checked against its field (ModelInputError
    naming it otherwise); keys the model does not declare, and nulls, are dropped."""
    declared = {field.name: field for field in fields}
    out = {}
    for name, value in raw.items():
        if value is None:
            continue
        common = COMMON_FIELDS.get(name)
        if common is not None:
            common.check(value)
        if name in declared:
            out[name] = declared[name].check(value)
    return out
