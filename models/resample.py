"""Band-limited resampling between integer rates, as torchaudio resamples by default.

References that resample with ``torchaudio.transforms.Resample`` (or
``torchaudio.functional.resample``) with its defaults get the same samples here:
S3Gen's ``embed_ref`` (Chatterbox: its 24 kHz reference clip to 16 kHz) and
VoXtream's prompt (any rate to 24 kHz for Mimi and to 16 kHz for the speaker
encoder). The filter is a windowed sinc with a Hann window, 6 zero crossings each
side, cut-off at 0.99 of the lower Nyquist. The rates are reduced by their
gcd to ``orig : new``; output sample ``j`` of each block of ``new`` reads the input
around ``j * orig / new`` through its own filter, so the whole resampler is one
strided convolution with ``new`` filters, each ``2 * width + orig`` taps long. The
filters are computed in float64 (but for the output phases, in float32) and applied
in float32, as torchaudio does; the output has ``ceil(len * new / orig)`` samples,
the edges read zeros.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from torch.nn import functional as F

LOWPASS_FILTER_WIDTH = 6
"""Zero crossings of the sinc each side of the centre."""
ROLLOFF = 0.99
"""Cut-off as a fraction of the lower rate's Nyquist frequency."""


def _reduced(orig_sr: int, new_sr: int) -> tuple[int, int]:
    if int(orig_sr) != orig_sr or int(new_sr) != new_sr or orig_sr <= 0 or new_sr <= 0:
        raise ValueError(f"rates must be positive integers, got {orig_sr} and {new_sr}")
    gcd = math.gcd(int(orig_sr), int(new_sr))
    return int(orig_sr) // gcd, int(new_sr) // gcd


@lru_cache(maxsize=16)
def _filters(orig: int, new: int) -> tuple[np.ndarray, int]:
    """([new, 2 * width + orig] float32 filters, width) for rates already reduced."""
    cutoff = min(orig, new) * ROLLOFF  # in units of the reduced rates
    width = math.ceil(LOWPASS_FILTER_WIDTH * orig / cutoff)
    taps = np.arange(-width, width + orig, dtype=np.float64) / orig  # input times
    # Output times within a block, j / new: rounded to float32 first, as torchaudio
    # rounds them (its filters then differ from exact ones by up to 1e-5 at 44.1 kHz).
    phases = (np.arange(new, dtype=np.float32) / np.float32(new)).astype(np.float64)
    t = (taps[None, :] - phases[:, None]) * cutoff  # in zero crossings
    t = np.clip(t, -LOWPASS_FILTER_WIDTH, LOWPASS_FILTER_WIDTH)
    window = np.cos(t * math.pi / (2 * LOWPASS_FILTER_WIDTH)) ** 2
    sinc = np.sinc(t)  # sin(pi t) / (pi t), 1 at 0
    filters = sinc * window * (cutoff / orig)
    return filters.astype(np.float32), width


def resample(
    wav: torch.Tensor | np.ndarray, orig_sr: int, new_sr: int
) -> torch.Tensor | np.ndarray:
    """Resample float audio [..., samples] from ``orig_sr`` to ``new_sr`` (integers),
    as ``torchaudio.functional.resample`` does with its defaults. Returns the type it
    is given (a numpy array or a tensor on the input's device), float32."""
    if isinstance(wav, np.ndarray):
        return resample(torch.from_numpy(np.ascontiguousarray(wav)), orig_sr, new_sr).numpy()
    if not wav.is_floating_point():
        raise TypeError(f"resample takes float audio, got {wav.dtype}")
    orig, new = _reduced(orig_sr, new_sr)
    x = wav.to(torch.float32)
    if orig == new:
        return x
    filters, width = _filters(orig, new)
    kernel = torch.from_numpy(filters).to(x.device).unsqueeze(1)  # [new, 1, taps]
    shape = x.shape
    length = shape[-1]
    flat = F.pad(x.reshape(-1, 1, length), (width, width + orig))
    out = F.conv1d(flat, kernel, stride=orig)  # [B, new, blocks]
    out = out.transpose(1, 2).reshape(flat.shape[0], -1)
    target = -(-new * length // orig)  # ceil
    return out[:, :target].reshape(*shape[:-1], target)
