"""Slaney mel filters and the log-mel spectrogram that model families share.

``mel_filterbank`` is what ``librosa.filters.mel`` builds by default (Slaney's
scale: linear below 1 kHz, logarithmic above; each triangle scaled to unit area),
computed in the same order so the float32 weights are the same bits. ``log_mel``
is the magnitude STFT with reflect padding and no centering that Qwen3-TTS's
speaker encoder and S3Gen's prompt mel both read (with their own sizes).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asanyarray(hz, dtype=np.float64)
    mel = hz / _F_SP
    log_part = _MIN_LOG_MEL + np.log(np.maximum(hz, 1e-10) / _MIN_LOG_HZ) / _LOGSTEP
    return np.where(hz >= _MIN_LOG_HZ, log_part, mel)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asanyarray(mel, dtype=np.float64)
    hz = _F_SP * mel
    log_part = _MIN_LOG_HZ * np.exp(_LOGSTEP * (mel - _MIN_LOG_MEL))
    return np.where(mel >= _MIN_LOG_MEL, log_part, hz)


def mel_filterbank(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] float32, Slaney-normalised triangles."""
    weights = np.zeros((n_mels, n_fft // 2 + 1), dtype=np.float32)
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights


def log_mel(
    wav: torch.Tensor,
    sr: int = 24000,
    n_fft: int = 1024,
    n_mels: int = 128,
    hop: int = 256,
    fmin: float = 0.0,
    fmax: float = 12000.0,
) -> torch.Tensor:
    """wav [B, samples] float32 -> log mel [B, frames, n_mels]."""
    basis = torch.from_numpy(mel_filterbank(sr, n_fft, n_mels, fmin, fmax)).float()
    pad = (n_fft - hop) // 2
    y = F.pad(wav[:, None], (pad, pad), mode="reflect")[:, 0]
    spec = torch.stft(
        y,
        n_fft,
        hop_length=hop,
        win_length=n_fft,
        window=torch.hann_window(n_fft),
        center=False,
        normalized=False,
        onesided=True,
        return_complex=True,
    )
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.matmul(basis, mag)
    return torch.log(torch.clamp(mel, min=1e-5)).transpose(1, 2)
