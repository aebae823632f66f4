"""Per-request settings from ``SynthParams.extra``, declared once as request fields.

The fields (``request_fields``) are what the model advertises in its
capabilities: every endpoint checks a request against them with the same
ranges. Keys: ``temperature`` (0 = greedy), ``top_k``, ``top_p``,
``repetition_penalty``, ``seed``, ``subtalker_temperature``/``subtalker_top_k``/
``subtalker_top_p`` (default: the talker's values when those are given, else the
checkpoint's), ``streaming_text`` (bool; unset: the variant's reference default for a
whole text, streaming for text that streams in), ``max_new_tokens`` (frames). Base model
voice: ``ref_audio`` (audio file bytes, base64 text, or float samples with
``ref_audio_sample_rate``), ``ref_text``, ``x_vector_only``, ``speaker_embedding``
(floats), or a precomputed ``voice_prompt`` (a stored voice, set by the server).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from models.base import RequestField
from models.fields import (
    MAX_NEW_TOKENS,
    REF_AUDIO,
    REF_AUDIO_SAMPLE_RATE,
    REF_TEXT,
    REPETITION_PENALTY,
    SEED,
    SPEAKER_EMBEDDING,
    STREAMING_TEXT,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    X_VECTOR_ONLY,
)
from models.qwen3_tts.sampling import SamplingParams


def request_fields(max_frames: int, sampling: SamplingParams) -> tuple[RequestField, ...]:
    """What a Qwen3-TTS request may set, with the loaded checkpoint's ``sampling``
    defaults: every endpoint checks against these, and lists them."""
    top_k = replace(TOP_K, high=1 << 20, doc="0 keeps every id")
    return (
        replace(TEMPERATURE, default=sampling.temperature),
        replace(top_k, default=sampling.top_k),
        replace(TOP_P, default=sampling.top_p),
        replace(REPETITION_PENALTY, doc="on code 0", default=sampling.repetition_penalty),
        replace(
            TEMPERATURE,
            name="subtalker_temperature",
            doc="the code predictor's; unset: temperature's when given",
            default=sampling.subtalker_temperature,
        ),
        replace(
            top_k,
            name="subtalker_top_k",
            doc="the code predictor's; unset: top_k's when given",
            default=sampling.subtalker_top_k,
        ),
        replace(
            TOP_P,
            name="subtalker_top_p",
            doc="the code predictor's; unset: top_p's when given",
            default=sampling.subtalker_top_p,
        ),
        replace(SEED, default=sampling.seed),
        replace(MAX_NEW_TOKENS, high=max_frames, default=max_frames),
        replace(
            STREAMING_TEXT,
            doc="false: all text before speaking; unset: the variant's default for whole text",
        ),
        replace(REF_AUDIO, doc="Base: audio of the voice to clone"),
        REF_AUDIO_SAMPLE_RATE,
        replace(REF_TEXT, doc="Base: the reference's transcript (ICL)"),
        replace(X_VECTOR_ONLY, doc="Base: clone from the x-vector alone"),
        replace(SPEAKER_EMBEDDING, doc="Base: a precomputed x-vector"),
    )


def _checked(extra: Mapping[str, Any], key: str, fields: Mapping[str, RequestField]) -> Any:
    value = extra.get(key)
    return None if value is None else fields[key].check(value)


def sampling_from(
    extra: Mapping[str, Any], defaults: SamplingParams, fields: Mapping[str, RequestField]
) -> SamplingParams:
    """Request sampling settings over the model's defaults (the subtalker's follow the
    talker's unless set)."""
    temperature = _checked(extra, "temperature", fields)
    top_k = _checked(extra, "top_k", fields)
    top_p = _checked(extra, "top_p", fields)
    penalty = _checked(extra, "repetition_penalty", fields)
    seed = _checked(extra, "seed", fields)
    sub_t = _checked(extra, "subtalker_temperature", fields)
    sub_k = _checked(extra, "subtalker_top_k", fields)
    sub_p = _checked(extra, "subtalker_top_p", fields)
    out = defaults
    if temperature is not None:
        out = replace(out, temperature=temperature)
        sub_t = temperature if sub_t is None else sub_t
    if top_k is not None:
        out = replace(out, top_k=top_k)
        sub_k = top_k if sub_k is None else sub_k
    if top_p is not None:
        out = replace(out, top_p=top_p)
        sub_p = top_p if sub_p is None else sub_p
    if penalty is not None:
        out = replace(out, repetition_penalty=penalty)
    if sub_t is not None:
        out = replace(out, subtalker_temperature=sub_t)
    if sub_k is not None:
        out = replace(out, subtalker_top_k=sub_k)
    if sub_p is not None:
        out = replace(out, subtalker_top_p=sub_p)
    if seed is not None:
        out = replace(out, seed=seed)
    return out


WHOLE_TEXT_STREAMING: Mapping[str, bool] = {
    "custom_voice": False,
    "voice_design": False,
    "base": True,
}
"""Per variant (``tts_model_type``), whether a whole text (all of it there before the
context starts) is spoken in streaming-text mode: the reference package's default
(``non_streaming_mode``: True for generate_custom_voice and generate_voice_design,
False for generate_voice_clone)."""


@dataclass(frozen=True)
class RequestSettings:
    sampling: SamplingParams
    streaming: bool | None
    """Streaming-text mode; None: the client did not choose, so the context's first
    prompt step does (``WHOLE_TEXT_STREAMING`` for a whole text, else streaming)."""
    max_frames: int


def settings_from(
    extra: Mapping[str, Any],
    defaults: SamplingParams,
    streaming: bool,
    max_frames: int,
    fields: Mapping[str, RequestField],
) -> RequestSettings:
    """``streaming``: the server's option; False means every context waits for all
    its text, True leaves the choice to the request or, failing that, to the context."""
    flag = _checked(extra, "streaming_text", fields)
    frames = _checked(extra, "max_new_tokens", fields)
    return RequestSettings(
        sampling=sampling_from(extra, defaults, fields),
        streaming=(None if streaming else False) if flag is None else flag,
        max_frames=frames if frames is not None else max_frames,
    )
