"""Reference audio for voice cloning (any family): bytes, base64 or samples -> mono float32 at a rate."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np
import soxr

from models.audio_decode import decode_audio
from models.base import ModelInputError

URL_SCHEMES = ("http://", "https://", "ftp://", "file://", "s3://")
MAX_AUDIO_BYTES = 16 << 20
"""Largest encoded reference accepted: the server's HTTP body cap (16 MiB)."""


def _bad(message: str) -> ModelInputError:
    return ModelInputError(f"ref_audio: {message}", param="ref_audio", code="invalid_field")


def load_reference_audio(
    value: Any, sample_rate: Any, target_rate: int, min_s: float, max_s: float
) -> np.ndarray:
    """Decode ``value`` and resample to ``target_rate``; enforce the length bounds."""
    wav, rate = decode_reference_audio(value, sample_rate, max_s)
    seconds = len(wav) / rate
    if seconds < min_s:
        raise _bad(f"too short ({seconds:.2f} s; at least {min_s} s)")
    if seconds > max_s:
        raise _bad(f"too long ({seconds:.2f} s; at most {max_s} s)")
    if rate != target_rate:
        wav = resample_like_librosa(wav, rate, target_rate)
    return wav


def decode_reference_audio(value: Any, sample_rate: Any, max_s: float) -> tuple[np.ndarray, int]:
    """``value`` (audio bytes, base64 or a data: URI, or samples with ``sample_rate``)
    as mono float32 samples at their own rate, and that rate; at most ``max_s``
    seconds of an encoded file are decoded (longer is an error)."""
    if isinstance(value, str):
        if value.lower().startswith(URL_SCHEMES):
            raise ModelInputError(
                "ref_audio: URLs are not fetched (URL fetching is off); send the audio as "
                "base64 or upload it once with POST /v1/audio/voices",
                param="ref_audio",
                code="unsupported_value",
            )
        if value.startswith("data:"):
            _, comma, text = value.partition(",")
            if not comma:
                raise _bad("a data: URI must carry base64 audio (data:audio/wav;base64,...)")
        else:
            text = value
        try:
            value = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise _bad("a string must be base64-encoded audio") from None
        if not value:
            raise _bad("the audio is empty")
    if isinstance(value, bytes | bytearray | memoryview):
        wav, rate = decode_audio(bytes(value), max_seconds=max_s, max_bytes=MAX_AUDIO_BYTES)
    elif isinstance(value, np.ndarray | list | tuple):
        wav = samples_of(value)
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
            raise ModelInputError(
                "ref_audio_sample_rate: required (a positive integer) with raw samples",
                param="ref_audio_sample_rate",
                code="invalid_field",
            )
        rate = sample_rate
    else:
        raise _bad(f"unsupported type {type(value).__name__}")
    if not np.all(np.isfinite(wav)):
        raise _bad("samples must be finite")
    return wav, rate


def samples_of(value: np.ndarray | list | tuple) -> np.ndarray:
    """An array of samples (one channel, or frames of channels) as mono float32;
    ModelInputError naming ``ref_audio`` for anything else (strings, booleans, nulls,
    ragged or deeper nesting, numbers beyond float64)."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        raise _bad("samples must be an array of numbers, or of equal-length frames") from None
    if array.dtype.kind not in "iuf":
        raise _bad("samples must be numbers (got strings, booleans, nulls or mixed values)")
    if array.ndim not in (1, 2):
        raise _bad(f"samples must be 1-D, or 2-D as [frame][channel]; got shape {array.shape}")
    if array.size == 0:
        raise _bad("the array holds no samples")
    wav = array.astype(np.float32)
    return wav.mean(axis=-1) if wav.ndim == 2 else wav


def resample_like_librosa(wav: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """soxr's high quality, then cut or zero-padded to ``ceil(len * target / rate)``
    samples: what ``librosa.load(sr=...)`` gives, which the families' references load
    clips with (soxr alone can be one sample shorter)."""
    out = soxr.resample(wav, rate, target_rate, quality="HQ").astype(np.float32)
    size = int(np.ceil(len(wav) * (float(target_rate) / rate)))
    return np.pad(out[:size], (0, max(0, size - len(out))))
