"""The Kaldi log-mel filterbank CAM++ reads: 80 bins of 16 kHz audio, mean-normalised.

S3Gen's speaker encoder computes ``torchaudio.compliance.kaldi.fbank(wav,
num_mel_bins=80)`` with every other option at torchaudio's default, then subtracts
each bin's mean over the clip. Those defaults, written out here:

- frames of 25 ms (400 samples) every 10 ms (160), only frames wholly inside the
  clip (``snip_edges``): ``1 + (n - 400) // 160`` of them;
- no dither (torchaudio's default is 0, unlike Kaldi's 1), so the features are
  deterministic;
- each frame's mean removed, then pre-emphasis 0.97 (the first sample against
  itself), then the Povey window (a symmetric Hann window to the power 0.85);
- zero-padded to a 512-point FFT; the power spectrum;
- 80 triangular bins equally spaced on Kaldi's mel scale (1127 ln(1 + f / 700))
  from 20 Hz to Nyquist, the Nyquist bin unused; no VTLN;
- the natural log, floored at float32's epsilon; no energy column, no per-clip
  mean subtraction inside fbank (the speaker encoder does its own, below).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

SAMPLE_RATE = 16_000
MEL_BINS = 80
FRAME_LENGTH = 400
"""Samples in a frame (25 ms)."""
FRAME_SHIFT = 160
"""Samples between frame starts (10 ms)."""
FFT_SIZE = 512
PREEMPHASIS = 0.97
LOW_FREQ = 20.0
EPSILON = float(np.finfo(np.float32).eps)


@lru_cache(maxsize=4)
def _povey_window(device: torch.device) -> torch.Tensor:
    """[400]: the symmetric Hann window to the power 0.85, in float32 as torchaudio
    computes it."""
    hann = torch.hann_window(FRAME_LENGTH, periodic=False, dtype=torch.float32)
    return hann.pow(0.85).to(device)


@lru_cache(maxsize=4)
def _mel_matrix(device: torch.device) -> torch.Tensor:
    """[FFT_SIZE // 2 + 1, MEL_BINS]: each FFT bin's weight in each mel bin.

    Computed in float32 as torchaudio computes it (the bin edges from float64 scalars,
    the FFT bins' mels and the slopes in float32): those are the values the checkpoint
    was trained on. Exact (float64) weights differ by up to 1.4e-5 on the narrow low
    bins, which moves quiet log bins by up to 3e-4."""
    nyquist = SAMPLE_RATE / 2
    low = 1127.0 * math.log(1.0 + LOW_FREQ / 700.0)
    high = 1127.0 * math.log(1.0 + nyquist / 700.0)
    step = (high - low) / (MEL_BINS + 1)
    index = torch.arange(MEL_BINS, dtype=torch.float32).unsqueeze(1)
    left = low + index * step
    center = low + (index + 1.0) * step
    right = low + (index + 2.0) * step
    freqs = (SAMPLE_RATE / FFT_SIZE) * torch.arange(FFT_SIZE // 2, dtype=torch.float32)
    mel = (1127.0 * (1.0 + freqs / 700.0).log()).unsqueeze(0)
    rising = (mel - left) / (center - left)
    falling = (right - mel) / (right - center)
    weights = torch.minimum(rising, falling).clamp_min(0.0)  # [MEL_BINS, FFT_SIZE // 2]
    weights = torch.cat((weights, torch.zeros(MEL_BINS, 1)), dim=1)  # Nyquist: weight 0
    return weights.T.contiguous().to(device)


def frame_count(samples: int) -> int:
    return 0 if samples < FRAME_LENGTH else 1 + (samples - FRAME_LENGTH) // FRAME_SHIFT


def kaldi_fbank(wav: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Log-mel filterbank of one 16 kHz clip [n] (float, unit full scale) ->
    [frames, 80] float32, as ``torchaudio.compliance.kaldi.fbank(wav[None],
    num_mel_bins=80)`` gives it. A clip shorter than one frame (400 samples) is an
    error, as it is there."""
    x = torch.as_tensor(wav)
    if x.dim() != 1:
        raise ValueError(f"kaldi_fbank takes one clip [samples], got shape {tuple(x.shape)}")
    if x.shape[0] < FRAME_LENGTH:
        raise ValueError(
            f"clip too short for the filterbank: {x.shape[0]} samples, at least {FRAME_LENGTH}"
        )
    x = x.to(torch.float32)
    frames = x.unfold(0, FRAME_LENGTH, FRAME_SHIFT)  # [m, 400]
    frames = frames - frames.mean(dim=1, keepdim=True)
    previous = torch.cat((frames[:, :1], frames[:, :-1]), dim=1)
    frames = (frames - PREEMPHASIS * previous) * _povey_window(x.device)
    spectrum = torch.fft.rfft(frames, n=FFT_SIZE)  # zero-padded to 512
    power = spectrum.abs().pow(2.0)  # [m, 257]
    energies = power @ _mel_matrix(x.device)
    return energies.clamp_min(EPSILON).log()


def xvector_features(wav: torch.Tensor | np.ndarray) -> torch.Tensor:
    """CAM++'s input: the filterbank of one 16 kHz clip with each bin's mean over the
    clip subtracted, [frames, 80] float32."""
    feats = kaldi_fbank(wav)
    return feats - feats.mean(dim=0, keepdim=True)
