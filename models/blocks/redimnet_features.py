"""ReDimNet's front end: 16 kHz audio -> a log mel spectrogram normalised over time.

What IDRnD's ``MelBanks`` computes (``redimnet/layers/features.py``), all in float32
whatever the network's dtype:

1. optionally (``norm_signal``) each clip scaled to zero mean and unit deviation
   (population deviation, plus 1e-6);
2. pre-emphasis ``y[n] = x[n] - 0.97 x[n-1]``, the sample before the first one
   reflected (``y[0] = x[0] - 0.97 x[1]``);
3. torchaudio's ``MelSpectrogram``: a centred STFT (reflect padding of ``n_fft / 2``
   each side) with a periodic Hamming window of ``win_length`` zero-padded to
   ``n_fft``, the squared magnitude of each bin, then HTK-scale triangular filters
   without area normalisation from ``f_min`` to ``f_max``;
4. ``log(mel + 1e-6)``;
5. per clip and mel bin: the mean over frames subtracted (``spec_norm="mn"``), or
   also divided by the (sample) deviation plus 1e-8 (``"mvn"``), or a batch norm
   over the bins (``"bn"``, with its running statistics).

The pre-emphasis filter, the window and the filter matrix are buffers that the
published checkpoints hold (``spec.torchfbank.1.flipped_filter``,
``spec.torchfbank.2.spectrogram.window``, ``spec.torchfbank.2.mel_scale.fb``); a
loaded front end uses the stored values, a new one computes them as torchaudio does
(``htk_mel_filters``). SpecAugment and its settings only act in training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

PREEMPHASIS = 0.97
LOG_FLOOR = 1e-6
SIGNAL_EPS = 1e-6
MVN_EPS = 1e-8
SPEC_NORMS = ("mn", "mvn", "bn")


@dataclass(frozen=True)
class MelConfig:
    """``MelBanks``' settings (its defaults; ReDimNet passes ``n_mels`` and ``hop_length``)."""

    sample_rate: int = 16_000
    n_fft: int = 512
    win_length: int = 400
    hop_length: int = 160
    f_min: float = 20.0
    f_max: float = 7600.0
    n_mels: int = 80
    norm_signal: bool = False
    preemphasis: bool = True
    spec_norm: str = "mn"

    @property
    def n_freqs(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def min_samples(self) -> int:
        """The shortest clip the centred STFT takes (its reflect padding needs more
        samples than half a window)."""
        return self.n_fft // 2 + 1


def _htk_mel(hz: float) -> float:
    return 2595.0 * math.log10(1.0 + hz / 700.0)


def htk_mel_filters(
    n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int
) -> torch.Tensor:
    """[n_freqs, n_mels] float32 triangles on the HTK mel scale, peak 1, computed in
    float32 in torchaudio's order (``melscale_fbanks`` with ``norm=None``)."""
    freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    mels = torch.linspace(_htk_mel(f_min), _htk_mel(f_max), n_mels + 2)
    edges = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)  # n_mels + 2 corner frequencies
    widths = edges[1:] - edges[:-1]
    offsets = edges[None, :] - freqs[:, None]  # [n_freqs, n_mels + 2]
    rising = (-1.0 * offsets[:, :-2]) / widths[:-1]
    falling = offsets[:, 2:] / widths[1:]
    return torch.clamp(torch.minimum(rising, falling), min=0.0)


class _Buffers(nn.Module):
    """A holder of named buffers (the reference's module path to each of them)."""

    def __init__(self, **buffers: torch.Tensor) -> None:
        super().__init__()
        for name, value in buffers.items():
            self.register_buffer(name, value)


class MelFrontEnd(nn.Module):
    """Audio [B, samples] (float, unit full scale) -> features [B, n_mels, frames],
    ``frames = samples // hop_length + 1``; always computed in float32."""

    def __init__(self, cfg: MelConfig) -> None:
        super().__init__()
        if cfg.spec_norm not in SPEC_NORMS:
            raise ValueError(f"spec_norm must be one of {SPEC_NORMS}, got {cfg.spec_norm!r}")
        self.cfg = cfg
        stages = nn.Module()  # the reference's ``torchfbank`` Sequential: 1 pre-emphasis, 2 mel
        if cfg.preemphasis:
            taps = torch.tensor([[[-PREEMPHASIS, 1.0]]], dtype=torch.float32)
            stages.add_module("1", _Buffers(flipped_filter=taps))
        mel = nn.Module()
        mel.add_module("spectrogram", _Buffers(window=torch.hamming_window(cfg.win_length)))
        fb = htk_mel_filters(cfg.n_freqs, cfg.f_min, cfg.f_max, cfg.n_mels, cfg.sample_rate)
        mel.add_module("mel_scale", _Buffers(fb=fb))
        stages.add_module("2", mel)
        self.torchfbank = stages
        if cfg.spec_norm == "bn":
            self.spec_norm = nn.BatchNorm1d(cfg.n_mels)

    def power_mel(self, wav: torch.Tensor) -> torch.Tensor:
        """[B, samples] -> the mel power spectrogram [B, n_mels, frames] (steps 1-3)."""
        cfg = self.cfg
        x = wav.float()
        if x.shape[-1] < cfg.min_samples:
            raise ValueError(
                f"audio too short for the mel front end ({x.shape[-1]} samples; "
                f"at least {cfg.min_samples})"
            )
        if cfg.norm_signal:
            centred = x - x.mean(dim=-1, keepdim=True)
            x = centred / (x.std(dim=-1, keepdim=True, unbiased=False) + SIGNAL_EPS)
        if cfg.preemphasis:
            taps = self.torchfbank.get_submodule("1").flipped_filter.float()
            x = F.conv1d(F.pad(x[:, None], (1, 0), mode="reflect"), taps)[:, 0]
        mel = self.torchfbank.get_submodule("2")
        window = mel.spectrogram.window.float()
        spec = torch.stft(
            x,
            cfg.n_fft,
            hop_length=cfg.hop_length,
            win_length=cfg.win_length,
            window=window,
            center=True,
            pad_mode="reflect",
            normalized=False,
            onesided=True,
            return_complex=True,
        )
        power = spec.abs().pow(2.0)
        return torch.matmul(power.transpose(-1, -2), mel.mel_scale.fb.float()).transpose(-1, -2)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        with torch.autocast(wav.device.type, enabled=False):
            x = torch.log(self.power_mel(wav) + LOG_FLOOR)
            norm = self.cfg.spec_norm
            if norm == "bn":
                return self.spec_norm(x)
            centred = x - x.mean(dim=-1, keepdim=True)
            if norm == "mvn":
                return centred / (x.std(dim=-1, keepdim=True) + MVN_EPS)
            return centred
