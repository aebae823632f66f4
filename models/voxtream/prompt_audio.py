"""A voice prompt's audio, prepared as VoXtream prepares it (``utils/generator/prompt.py``).

The reference loads the clip at its own rate (``torchaudio.load``), then:

1. averages the channels (mono);
2. when ``normalize_prompt_loudness`` is set: measures the integrated loudness
   (pyloudnorm, ITU-R BS.1770, at the clip's rate) and scales the clip to
   ``prompt_loudness_lufs``, in float64, then down to a peak of 1 if it went above;
   a clip shorter than one 400 ms block, or whose loudness is not finite, is left
   as it is;
3. (VAD and speech enhancement only when asked for: both are off in the released
   configs, and not done here);
4. refuses a clip shorter than ``min_prompt_sec`` (1 s) and keeps the first
   ``max_prompt_sec`` (20 s) of a longer one, counted in samples at its own rate;
5. resamples that clip with torchaudio's default ``Resample`` to 24 kHz for Mimi and
   to 16 kHz for the speaker encoder (each only where the rate differs).

The defaults come from the generator configs of voxtream 0.2.5 (its sdist's
``configs/``): ``generator.json`` (the herimor/voxtream2.1 checkpoint) normalises to
-23 LUFS, ``generator_v1.json`` (herimor/voxtream2) does not; both have
``apply_vad: false``, ``enhance_prompt: false``, ``min_prompt_sec: 1`` and
``max_prompt_sec: 20``. The caller says which (``normalize_loudness``).

Beyond the reference: the clip's errors are ``ModelInputError`` naming ``ref_audio``
(the reference asserts), and a silent clip (no sample reaching one 16-bit step) is
refused rather than cloned.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pyloudnorm

from models.base import ModelInputError
from models.reference_audio import decode_reference_audio
from models.resample import resample

MIMI_RATE = 24_000
SPEAKER_RATE = 16_000
MIN_SECONDS = 1
"""``min_prompt_sec``: shorter clips are refused."""
MAX_SECONDS = 20
"""``max_prompt_sec``: longer clips are cut to this."""
LOUDNESS_LUFS = -23.0
"""``prompt_loudness_lufs`` of both released configs."""
MAX_INPUT_SECONDS = 120.0
"""The longest clip accepted (then cut to ``MAX_SECONDS``): bounds decoding work."""
SILENCE_PEAK = 1.0 / 32768.0
"""A clip whose every sample is below this (one step of 16-bit audio) is silent."""


@dataclass(frozen=True)
class PromptAudio:
    """The clip as the two encoders take it (float32, mono, unit full scale)."""

    mimi: np.ndarray
    """[samples] at 24 kHz: what Mimi encodes into the prompt's codes."""
    speaker: np.ndarray
    """[samples] at 16 kHz: what the speaker encoder embeds."""
    seconds: float
    """The length used (after the cut to ``MAX_SECONDS``)."""


def _bad(message: str) -> ModelInputError:
    return ModelInputError(f"ref_audio: {message}", param="ref_audio", code="invalid_field")


@lru_cache(maxsize=8)
def _meter(rate: int) -> pyloudnorm.Meter:
    return pyloudnorm.Meter(rate)


def normalize_prompt_loudness(wav: np.ndarray, rate: int, target_lufs: float) -> np.ndarray:
    """A mono clip scaled to ``target_lufs`` (peak at most 1), float32; the clip itself
    where its loudness cannot be measured (shorter than a block, or not finite)."""
    meter = _meter(rate)
    if wav.shape[-1] < int(meter.block_size * rate):
        return wav
    signal = np.asarray(wav, dtype=np.float32)
    with np.errstate(divide="ignore"):  # gating blocks of silence measure -inf
        loudness = meter.integrated_loudness(signal)
    if not np.isfinite(loudness):
        return wav
    # pyloudnorm's normalize.loudness: a float64 gain, so the product is float64.
    scaled = np.power(10.0, (target_lufs - loudness) / 20.0) * signal
    peak = float(np.max(np.abs(scaled)))
    if peak > 1.0:
        scaled /= peak
    return scaled.astype(np.float32)


def prepare_prompt_audio(
    wav: np.ndarray,
    rate: int,
    *,
    normalize_loudness: bool,
    target_lufs: float = LOUDNESS_LUFS,
) -> PromptAudio:
    """A clip at ``rate`` ([samples], or [channels, samples] to be averaged) -> the
    prompt's audio for Mimi and the speaker encoder (steps 1-5 above)."""
    if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
        raise ValueError(f"rate must be a positive integer, got {rate!r}")
    wav = np.asarray(wav, dtype=np.float32)
    if wav.ndim == 2:
        wav = wav.mean(axis=0)
    if wav.ndim != 1:
        raise _bad(f"expected mono samples or [channels, samples], got shape {wav.shape}")
    if not np.all(np.isfinite(wav)):
        raise _bad("samples must be finite")
    seconds = wav.size / rate
    if wav.size < rate * MIN_SECONDS:
        raise _bad(f"too short ({seconds:.2f} s); VoXtream needs at least {MIN_SECONDS} s")
    if seconds > MAX_INPUT_SECONDS:
        raise _bad(f"too long ({seconds:.2f} s; at most {MAX_INPUT_SECONDS:g} s)")
    if float(np.max(np.abs(wav))) < SILENCE_PEAK:
        raise _bad("the clip is silent; send a recording of the voice to clone")
    if normalize_loudness:
        wav = normalize_prompt_loudness(wav, rate, target_lufs)
    wav = wav[: rate * MAX_SECONDS]
    mimi = resample(wav, rate, MIMI_RATE) if rate != MIMI_RATE else wav
    speaker = resample(wav, rate, SPEAKER_RATE) if rate != SPEAKER_RATE else wav
    assert isinstance(mimi, np.ndarray) and isinstance(speaker, np.ndarray)
    return PromptAudio(mimi, speaker, wav.size / rate)


def load_prompt_audio(
    value: Any,
    sample_rate: Any = None,
    *,
    normalize_loudness: bool,
    target_lufs: float = LOUDNESS_LUFS,
) -> PromptAudio:
    """``ref_audio`` as a request carries it (audio file bytes, base64 or a data: URI;
    or samples with ``ref_audio_sample_rate``) -> the prompt's audio, decoded at the
    file's own rate as ``torchaudio.load`` does (channels averaged). Every problem is
    a ``ModelInputError`` naming ``ref_audio`` (or ``ref_audio_sample_rate``)."""
    wav, rate = decode_reference_audio(value, sample_rate, MAX_INPUT_SECONDS)
    return prepare_prompt_audio(
        wav, int(rate), normalize_loudness=normalize_loudness, target_lufs=target_lufs
    )
