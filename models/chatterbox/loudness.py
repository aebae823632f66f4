"""Loudness normalisation of a cloning clip, as Chatterbox prepares reference audio.

The clip's integrated loudness (ITU-R BS.1770-4: K-weighting, 400 ms blocks
with 75% overlap, the -70 LUFS absolute and -10 LU relative gates) is measured
with pyloudnorm, and one gain brings it to ``target_lufs``. A clip that cannot
be measured (shorter than one 400 ms block, not floating point) or whose gain
is not a finite positive number (silence measures -inf LUFS) is returned as it
came.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pyloudnorm

log = logging.getLogger(__name__)

TARGET_LUFS = -27.0


def normalize_loudness(
    wav: np.ndarray, sample_rate: int, target_lufs: float = TARGET_LUFS
) -> np.ndarray:
    """``wav`` (mono [samples] or [samples, channels]) scaled to ``target_lufs``,
    in its own dtype; unchanged where its loudness cannot be measured."""
    try:
        loudness = pyloudnorm.Meter(sample_rate).integrated_loudness(wav)
        gain = 10.0 ** ((target_lufs - float(loudness)) / 20.0)
    except Exception as err:  # noqa: BLE001 (any failure to measure leaves the clip as it is)
        log.warning("loudness normalisation skipped: %s", err)
        return wav
    if not (math.isfinite(gain) and gain > 0.0):
        return wav
    # A Python float keeps the clip's dtype (a numpy float64 scalar would promote float32).
    return wav * gain
