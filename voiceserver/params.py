"""Request fields -> validated SynthParams, the same for every endpoint.

This is the one mapper between what a client sends and what a model takes. The
served model declares its options once (``Capabilities.request_fields``: name,
type, range, default, doc); every endpoint hands its request's options here in
two maps:

- ``options``: the open per-model map (``options`` on the native socket, the
  vllm-omni socket and HTTP). Every name must be one the model declares, else
  ``invalid_field`` listing the model's options: a client that writes this map
  targets this model, so a misspelt name must not quietly fall back to a default.
- ``extra``: the top-level names clients of vllm-omni and OpenAI (and earlier
  clients of ours) already send (``temperature``, ``seed``, ``ref_text``,
  vllm-omni's spellings ``x_vector_only_mode`` and ``non_streaming_mode``, and
  HTTP's ``extra_params``). Each is checked against the model's field, or against
  the shared declaration (``models.fields``) when the model has none by that
  name, so a malformed value is refused whichever model is served; then the
  names the model does not take are dropped, as they always were (these clients
  send them to every model).

Values are checked by the field's own ``check`` (its message names the field and
what it takes), and strings and arrays are bounded as every text field is
(:data:`~protocol.messages.REF_TEXT_MAX_LEN` characters of plain text,
:data:`~protocol.messages.SPEAKER_EMBEDDING_MAX_LEN` numbers).

The same mapper reads a language in any spelling (``voiceserver.languages``),
checks vllm-omni's ``task_type`` against the loaded variant
(``voiceserver.tasks``), and drops a ``voice`` the variant has no use for
(no named voices: VoiceDesign, Base) with a warning instead of refusing it, as
vllm-omni checks ``voice`` only for CustomVoice; its own example client sends
one with every request. ``instructions`` on a model that does not use them
(``Capabilities.supports_instructions``) are dropped the same way: OpenAI's
clients send them to any model. ``speed`` is checked against OpenAI's range
(:data:`~models.fields.SPEED`) for every model: each honours it, the model as far
as it can and the server's time-stretch for the rest (``voiceserver.engine.tempo``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from models.base import ModelInputError, RequestField, SynthParams
from models.fields import SHARED, SPEED
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import REF_TEXT_MAX_LEN, SPEAKER_EMBEDDING_MAX_LEN, OptionField
from protocol.options import ModelOptions
from protocol.validation import check_text
from voiceserver.languages import resolve_language
from voiceserver.runtime import Runtime
from voiceserver.voices import INLINE_VOICE_KEYS, resolve_voice

log = logging.getLogger(__name__)

ALIASES: Mapping[str, tuple[str, bool]] = {
    "x_vector_only_mode": ("x_vector_only", False),
    "non_streaming_mode": ("streaming_text", True),
}
"""vllm-omni's spellings of model fields: ``wire name -> (field, value negated)``."""


def resolve_params(
    rt: Runtime,
    *,
    model: str | None = None,
    voice: str | None = None,
    language: str | None = None,
    speed: float = 1.0,
    instructions: str | None = None,
    options: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    task_type: str | None = None,
    warnings: list[str] | None = None,
) -> SynthParams:
    """Fill defaults from the model's capabilities and validate; raises
    ModelInputError naming the field and what is allowed.

    ``options`` and ``extra``: the model options, strict and lenient (see the
    module's docstring). ``task_type`` (vllm-omni's CustomVoice | VoiceDesign |
    Base; None: the variant's own) is checked against what the loaded model can
    do. Things the request asked for that are ignored are logged and appended to
    ``warnings``.
    """
    caps = rt.model.capabilities
    if model is not None and model not in rt.model_names:
        raise ModelInputError(
            f"unknown model {model!r}; this server serves: {', '.join(rt.model_names)}",
            param="model",
            code="unknown_model",
        )
    speed = SPEED.check(speed)
    options, extra = options or {}, extra or {}
    chosen = model_options(caps.request_fields, options, extra)
    asked = _asked(options, extra)
    stored = voice is not None and rt.voices.find(voice) is not None
    rt.tasks.check(task_type, instructions=instructions, extra=asked, stored_voice=stored)
    inline = any(asked.get(key) is not None for key in INLINE_VOICE_KEYS)
    # On a cloning variant a name may be an uploaded voice: an unknown one stays an error.
    lookup = "Base" in rt.tasks.tasks and not inline
    if voice is not None and not rt.tasks.named_voices and not stored and not lookup:
        if not rt.voices.is_builtin(voice):
            _ignored(
                f"voice {voice[:64]!r} ignored: the loaded model ({', '.join(rt.tasks.tasks)})"
                " has no named voices",
                warnings,
            )
        voice = None
    if instructions and not caps.supports_instructions:
        _ignored(
            f"instructions ignored: the served model ({rt.model_config.name}) does not take"
            " instructions",
            warnings,
        )
        instructions = None
    voice, chosen = resolve_voice(rt.voices, rt.model.runner, voice, chosen)
    params = SynthParams(
        voice=voice or caps.default_voice,
        language=resolve_language(language, caps.languages),
        speed=speed,
        instructions=instructions,
        extra=chosen,
    )
    rt.model.runner.validate(params)
    return params


def _ignored(message: str, warnings: list[str] | None) -> None:
    """Something the request asked for is ignored: logged, and told to the client."""
    log.warning("%s", message)
    if warnings is not None:
        warnings.append(message)


def model_options(
    fields: Iterable[RequestField], options: Mapping[str, Any], extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The model settings a request chose, by field name, each checked against its
    field (ModelInputError naming it otherwise). ``options``: every name must be a
    field; ``extra``: names the model does not take are checked against the shared
    declaration, then dropped. An ``extra`` name wins over the same ``options`` name;
    nulls count as absent."""
    declared = {field.name: field for field in fields}
    out: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        field = declared.get(name)
        if field is None:
            raise _not_an_option(name, declared.values())
        if field.kind == "audio":
            raise ModelInputError(
                f"{name}: reference audio is the request's own `{name}` field, not an option",
                param=name,
                code="invalid_field",
            )
        out[name] = _check(field, value)
    for name, value in extra.items():
        if value is None:
            continue
        target, negated = ALIASES.get(name, (name, False))
        field = declared.get(target)
        known = field if field is not None else SHARED.get(target)
        if known is None:
            continue  # a name no model here declares (an extra_params entry): ignored
        checked = _check(known if name == target else replace(known, name=name), value)
        if field is not None:
            out[target] = (not checked) if negated else checked
    return out


def _check(field: RequestField, value: Any) -> Any:
    """``field.check`` and the bounds every text and array field has."""
    if field.kind == "string" and isinstance(value, str):
        if len(value) > REF_TEXT_MAX_LEN:
            raise ModelInputError(
                f"{field.name}: is {len(value)} characters long; at most {REF_TEXT_MAX_LEN}",
                param=field.name,
                code="text_too_long",
            )
        try:
            check_text(value, field.name)
        except ProtocolError as err:
            raise ModelInputError(err.message, param=field.name, code=str(err.code)) from None
    numbers = field.kind == "numbers" and isinstance(value, list | tuple)
    if numbers and len(value) > SPEAKER_EMBEDDING_MAX_LEN:
        raise ModelInputError(
            f"{field.name}: {len(value)} numbers; at most {SPEAKER_EMBEDDING_MAX_LEN}",
            param=field.name,
            code="invalid_field",
        )
    return field.check(value)


def _not_an_option(name: str, fields: Iterable[RequestField]) -> ModelInputError:
    takes = [field.name for field in fields if field.kind != "audio"]
    listed = ", ".join(takes) if takes else "none"
    return ModelInputError(
        f"{name[:64]}: not an option of the served model; its options: {listed}",
        param=name[:64],
        code="invalid_field",
    )


def _asked(options: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Every value the request sent, under the model's field names (task checks
    look at what was asked for, whether or not the model takes it)."""
    asked = dict(options)
    for name, value in extra.items():
        target, negated = ALIASES.get(name, (name, False))
        asked[target] = (not value) if negated and isinstance(value, bool) else value
    return asked


def option_fields(fields: Iterable[RequestField]) -> list[OptionField]:
    """The model's fields as clients see them (``session.created``, ``GET /v1/models``)."""
    out = []
    for field in fields:
        exclusive = field.low_exclusive and field.low is not None
        out.append(
            OptionField(
                name=field.name,
                type=field.kind,
                minimum=field.low,
                maximum=field.high,
                exclusive_minimum=exclusive,
                default=field.default,
                doc=field.doc,
            )
        )
    return out


def socket_options(fields: tuple[RequestField, ...]) -> ModelOptions:
    """The native socket's view of the model's options: listed in ``session.created``,
    and each message's checked here (a bad one is refused with its ``param``)."""

    def check(options: Mapping[str, Any], top_level: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return model_options(fields, options, top_level)
        except ModelInputError as err:
            raise ProtocolError(_code(err.code), str(err), param=err.param) from None

    return ModelOptions(tuple(option_fields(fields)), check)


def _code(code: str) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.INVALID_FIELD
