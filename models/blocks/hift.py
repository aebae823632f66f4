"""Chatterbox Turbo's vocoder (HiFT, S3Gen's ``mel2wav``): mel [B, 80, F] -> 24 kHz audio.

A neural source filter feeding an iSTFT net. An F0 predictor reads the mel; the
F0 (nearest-upsampled to one value per sample) drives a sine source of 9
harmonics plus Gaussian noise; a HiFi-GAN style decoder upsamples the mel x120
(8, 5, 3), mixing in the source's STFT at every scale, and predicts a 16-point
spectrum (magnitude, phase) every 4 samples, which the iSTFT turns into audio.
One mel frame (20 ms) is 480 samples.

The source is random: each harmonic's initial phase and the additive noise. The
reference draws them from torch's global generator inside its forward pass;
here they are inputs (``SourceNoise``), and ``draw_source_noise`` draws them
with the reference's shapes in its order, so a seeded run reproduces it.

Parameter names are the reference's ``mel2wav.*`` keys without the prefix,
weight norm included (``torch.nn.utils.parametrizations.weight_norm``);
``load_hift`` checks the keys strictly, then folds the weight norm away.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

from models.checkpoint import load_weights

SAMPLE_RATE = 24000
FRAME_SAMPLES = 480
"""Audio samples per mel frame (24 kHz / 50 Hz)."""
MEL_CHANNELS = 80
HARMONICS = 9
"""Sine components of the source: the fundamental and 8 overtones."""
N_FFT = 16
STFT_HOP = 4
UPSAMPLE = ((8, 16), (5, 11), (3, 7))
"""(stride, kernel) of each upsampling stage: 8 * 5 * 3 * STFT_HOP = FRAME_SAMPLES."""
RESBLOCK_KERNELS = (3, 7, 11)
SOURCE_KERNELS = (7, 7, 11)
DILATIONS = (1, 3, 5)
BASE_CHANNELS = 512

SINE_AMP = 0.1
VOICED_NOISE = 0.003
"""Noise std where voiced; unvoiced samples get noise of std SINE_AMP / 3 and no sine."""
VOICED_THRESHOLD = 10.0
"""Hz: F0 above this is voiced."""
STAGE_SLOPE = 0.1
"""leaky_relu slope before each upsampling; the one before ``conv_post`` keeps torch's 0.01."""
MAX_MAGNITUDE = 100.0
AUDIO_LIMIT = 0.99


def _wn_conv(c_in: int, c_out: int, kernel: int, dilation: int = 1) -> nn.Conv1d:
    """A 'same' length weight-normed conv (odd kernel)."""
    pad = dilation * (kernel - 1) // 2
    return weight_norm(nn.Conv1d(c_in, c_out, kernel, dilation=dilation, padding=pad))


class Snake(nn.Module):
    """``x + sin(a x)^2 / a`` with a learned per-channel frequency ``a``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.alpha[None, :, None]
        # The checkpoint's authors add 1e-9 before dividing; kept for equal numerics.
        return x + (1.0 / (a + 1e-9)) * torch.sin(x * a).pow(2)


class ResBlock(nn.Module):
    """Three residual units, each Snake -> dilated conv -> Snake -> conv."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(_wn_conv(channels, channels, kernel, d) for d in DILATIONS)
        self.convs2 = nn.ModuleList(_wn_conv(channels, channels, kernel) for _ in DILATIONS)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in DILATIONS)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in DILATIONS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv1, conv2, act1, act2 in zip(
            self.convs1, self.convs2, self.activations1, self.activations2, strict=True
        ):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


class F0Predictor(nn.Module):
    """Mel [B, 80, F] -> F0 in Hz [B, F]: five k=3 convs with ELU, then a linear
    read-out whose absolute value is the F0 (reaching +-5 frames)."""

    def __init__(self, channels: int = BASE_CHANNELS) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(5):
            layers += [_wn_conv(MEL_CHANNELS if i == 0 else channels, channels, 3), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        hidden = self.condnet(mel).transpose(1, 2)
        return self.classifier(hidden).squeeze(-1).abs()


@dataclass(frozen=True)
class SourceNoise:
    """The sine source's random inputs for B rows of F frames.

    ``phases`` [B, 9, 1]: each harmonic's initial phase in radians (the
    fundamental's is 0); ``noise`` [B, 9, F * 480]: standard normal, scaled by the
    voiced/unvoiced noise level of each sample."""

    phases: torch.Tensor
    noise: torch.Tensor

    def to(self, device: torch.device, dtype: torch.dtype) -> SourceNoise:
        return SourceNoise(self.phases.to(device, dtype), self.noise.to(device, dtype))


def draw_source_noise(
    frames: int, batch: int = 1, generator: torch.Generator | None = None
) -> SourceNoise:
    """The reference's draws, in its order: the phases (``torch.rand`` [B, 9, 1]
    mapped to [-pi, pi)), the noise (``torch.randn`` [B, 9, S]), then a
    ``torch.randn`` [B, S, 1] it discards (S = frames * 480). Drawing the last one
    too leaves ``generator`` (torch's global one when None) where the reference
    leaves it."""
    samples = frames * FRAME_SAMPLES
    unit = torch.rand(batch, HARMONICS, 1, generator=generator)
    noise = torch.randn(batch, HARMONICS, samples, generator=generator)
    torch.randn(batch, samples, 1, generator=generator)
    # As torch.distributions.Uniform(-pi, pi) maps it, in float32.
    low, high = torch.tensor(-math.pi), torch.tensor(math.pi)
    phases = low + unit * (high - low)
    phases[:, 0] = 0.0
    return SourceNoise(phases, noise)


class SineSource(nn.Module):
    """Per-sample F0 [B, 1, S] -> excitation [B, 1, S]: harmonic sines (zero where
    unvoiced) plus noise, merged by a linear layer and tanh."""

    def __init__(self) -> None:
        super().__init__()
        self.l_linear = nn.Linear(HARMONICS, 1)

    def forward(self, f0: torch.Tensor, rand: SourceNoise) -> torch.Tensor:
        order = torch.arange(1, HARMONICS + 1, dtype=f0.dtype, device=f0.device)
        cycles = f0 * order[None, :, None] / SAMPLE_RATE  # [B, 9, S] cycles per sample
        # The phase accumulates from the first sample of the call.
        theta = 2 * math.pi * (torch.cumsum(cycles, dim=-1) % 1)
        sines = SINE_AMP * torch.sin(theta + rand.phases)
        voiced = (f0 > VOICED_THRESHOLD).to(f0.dtype)
        noise_std = voiced * VOICED_NOISE + (1 - voiced) * SINE_AMP / 3
        harmonics = sines * voiced + noise_std * rand.noise
        return torch.tanh(self.l_linear(harmonics.transpose(1, 2))).transpose(1, 2)


def hann_window(size: int) -> torch.Tensor:
    """Periodic Hann window, computed in float64 and rounded to float32 (as scipy's is)."""
    n = torch.arange(size, dtype=torch.float64)
    return (0.5 - 0.5 * torch.cos(2 * math.pi * n / size)).float()


class HiFT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.f0_predictor = F0Predictor()
        self.m_source = SineSource()
        self.conv_pre = _wn_conv(MEL_CHANNELS, BASE_CHANNELS, 7)
        self.ups = nn.ModuleList()
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        spectrum = N_FFT + 2  # real and imaginary parts of N_FFT // 2 + 1 bins
        # The source STFT (one column per 4 samples) reaches each stage by striding
        # down by the upsampling still to come after it.
        still_to_come = [math.prod(s for s, _ in UPSAMPLE[i + 1 :]) for i in range(len(UPSAMPLE))]
        for i, ((stride, kernel), down, src_kernel) in enumerate(
            zip(UPSAMPLE, still_to_come, SOURCE_KERNELS, strict=True)
        ):
            c_in, c_out = BASE_CHANNELS >> i, BASE_CHANNELS >> (i + 1)
            up = nn.ConvTranspose1d(c_in, c_out, kernel, stride, padding=(kernel - stride) // 2)
            self.ups.append(weight_norm(up))
            if down == 1:
                self.source_downs.append(nn.Conv1d(spectrum, c_out, 1))
            else:
                self.source_downs.append(
                    nn.Conv1d(spectrum, c_out, 2 * down, down, padding=down // 2)
                )
            self.source_resblocks.append(ResBlock(c_out, src_kernel))
            self.resblocks.extend(ResBlock(c_out, k) for k in RESBLOCK_KERNELS)
        self.conv_post = _wn_conv(BASE_CHANNELS >> len(UPSAMPLE), spectrum, 7)
        self.register_buffer("window", hann_window(N_FFT), persistent=False)

    def source(self, mel: torch.Tensor, rand: SourceNoise) -> torch.Tensor:
        """The excitation [B, 1, F * 480] of mel [B, 80, F]."""
        f0 = self.f0_predictor(mel)
        per_sample = F.interpolate(f0[:, None], scale_factor=float(FRAME_SAMPLES), mode="nearest")
        return self.m_source(per_sample, rand)

    def decode(self, mel: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """Mel [B, 80, F] and its excitation [B, 1, F * 480] -> audio [B, F * 480]."""
        # The transforms run in float32 whatever the weights' dtype: FFTs take no bf16.
        window = self.window.float()
        spec = torch.stft(
            source.squeeze(1).float(), N_FFT, STFT_HOP, N_FFT, window=window, return_complex=True
        )
        spec = torch.view_as_real(spec)
        spec = torch.cat([spec[..., 0], spec[..., 1]], dim=1).to(mel.dtype)  # [B, 18, 120 F + 1]

        x = self.conv_pre(mel)
        per_stage = len(RESBLOCK_KERNELS)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, STAGE_SLOPE))
            if i == len(self.ups) - 1:
                # One column more, matching the STFT's 120 F + 1.
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + self.source_resblocks[i](self.source_downs[i](spec))
            blocks = self.resblocks[i * per_stage : (i + 1) * per_stage]
            total = blocks[0](x)
            for block in blocks[1:]:
                total = total + block(x)
            x = total / per_stage

        x = self.conv_post(F.leaky_relu(x)).float()
        bins = N_FFT // 2 + 1
        magnitude = torch.exp(x[:, :bins]).clamp(max=MAX_MAGNITUDE)
        phase = torch.sin(x[:, bins:])
        spectrum = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        audio = torch.istft(spectrum, N_FFT, STFT_HOP, N_FFT, window=window)
        return audio.clamp(-AUDIO_LIMIT, AUDIO_LIMIT)

    def forward(self, mel: torch.Tensor, rand: SourceNoise) -> torch.Tensor:
        """Mel [B, 80, F] (float32) -> audio [B, F * 480] in [-0.99, 0.99]."""
        return self.decode(mel, self.source(mel, rand))

    def resume(
        self, mel: torch.Tensor, rand: SourceNoise, played: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio [B, F * 480] of mel [B, 80, F] and its excitation [B, 1, F * 480], the
        excitation's first samples replaced by ``played`` [B, 1, S] (what earlier calls
        over a prefix of this mel already sounded), as the reference's
        ``inference(cache_source=...)`` does: re-decoding a grown prefix keeps the
        sines it already played instead of jumping to new ones."""
        source = self.source(mel, rand)
        if played is not None and played.shape[-1]:
            source[..., : played.shape[-1]] = played
        return self.decode(mel, source), source

    def fold_weight_norm(self) -> HiFT:
        """Replace every weight-normed weight by its value (identical numbers,
        computed once instead of on every call); the keys then no longer match
        the checkpoint's."""
        for module in self.modules():
            if parametrize.is_parametrized(module, "weight"):
                parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
        return self


PREFIX = "mel2wav."
"""The vocoder's keys in ``s3gen_meanflow.safetensors``."""


def load_hift(state: dict[str, torch.Tensor], fold: bool = True) -> HiFT:
    """HiFT from a checkpoint's tensors (its ``mel2wav.*`` keys; the others are
    ignored). Every key must be there and none extra: a ``ValueError`` names the
    first few that differ."""
    sub = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
    model = HiFT()
    load_weights(model, sub, "mel2wav", PREFIX)
    model.eval()
    return model.fold_weight_norm() if fold else model
