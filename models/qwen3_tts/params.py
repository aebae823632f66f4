"""Per-request settings from ``SynthParams.extra``, validated with stable error codes.

Keys: ``temperature`` (0 = greedy), ``top_k``, ``top_p``, ``repetition_penalty``,
``seed``, ``subtalker_temperature``/``subtalker_top_k``/``subtalker_top_p``
(default: the talker's values when those are given, else the checkpoint's),
``streaming_text`` (bool), ``max_new_tokens`` (frames). Base model voice:
``ref_audio`` (audio file bytes, base64 text, or float samples with
``ref_audio_sample_rate``), ``ref_text``, ``x_vector_only``,
``speaker_embedding`` (floats), or a precomputed ``voice_prompt``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from models.base import ModelInputError
from models.qwen3_tts.sampling import SamplingParams

SAMPLING_KEYS = (
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "subtalker_temperature",
    "subtalker_top_k",
    "subtalker_top_p",
    "seed",
)
VOICE_KEYS = (
    "ref_audio",
    "ref_audio_sample_rate",
    "ref_text",
    "x_vector_only",
    "speaker_embedding",
    "voice_prompt",
)
OTHER_KEYS = ("streaming_text", "max_new_tokens")


def _bad(param: str, message: str) -> ModelInputError:
    return ModelInputError(f"{param}: {message}", param=param, code="invalid_field")


def _number(extra: Mapping[str, Any], key: str, lo: float, hi: float) -> float | None:
    if key not in extra or extra[key] is None:
        return None
    value = extra[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(key, f"must be a number, got {value!r}")
    if not lo <= float(value) <= hi:
        raise _bad(key, f"must be between {lo} and {hi}, got {value}")
    return float(value)


def _integer(extra: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    if key not in extra or extra[key] is None:
        return None
    value = extra[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(key, f"must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise _bad(key, f"must be between {lo} and {hi}, got {value}")
    return value


def sampling_from(extra: Mapping[str, Any], defaults: SamplingParams) -> SamplingParams:
    """Request sampling settings over the model's defaults."""
    temperature = _number(extra, "temperature", 0.0, 10.0)
    top_k = _integer(extra, "top_k", 0, 1 << 20)
    top_p = _number(extra, "top_p", 0.0, 1.0)
    if top_p is not None and top_p <= 0:
        raise _bad("top_p", "must be above 0")
    penalty = _number(extra, "repetition_penalty", 0.01, 10.0)
    seed = _integer(extra, "seed", -(1 << 63), (1 << 63) - 1)
    sub_t = _number(extra, "subtalker_temperature", 0.0, 10.0)
    sub_k = _integer(extra, "subtalker_top_k", 0, 1 << 20)
    sub_p = _number(extra, "subtalker_top_p", 0.0, 1.0)
    out = defaults
    if temperature is not None:
        out = replace(out, temperature=temperature)
        if sub_t is None:
            sub_t = temperature
    if top_k is not None:
        out = replace(out, top_k=top_k)
        if sub_k is None:
            sub_k = top_k
    if top_p is not None:
        out = replace(out, top_p=top_p)
        if sub_p is None:
            sub_p = top_p
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


@dataclass(frozen=True)
class RequestSettings:
    sampling: SamplingParams
    streaming: bool
    max_frames: int


def settings_from(
    extra: Mapping[str, Any], defaults: SamplingParams, streaming: bool, max_frames: int
) -> RequestSettings:
    if "streaming_text" in extra and extra["streaming_text"] is not None:
        if not isinstance(extra["streaming_text"], bool):
            raise _bad("streaming_text", "must be true or false")
        streaming = extra["streaming_text"]
    frames = _integer(extra, "max_new_tokens", 1, max_frames)
    return RequestSettings(
        sampling=sampling_from(extra, defaults),
        streaming=streaming,
        max_frames=frames if frames is not None else max_frames,
    )
