"""Random weights for Chatterbox Turbo's vocoder, at the real sizes, as ``mel2wav.*``
tensors of ``s3gen_meanflow.safetensors``.

Random weights are scaled so the audio they make looks like audio: each conv's
weight-norm gain g (the norm of each output channel's weights) keeps the
activations near unit scale, the Snake frequencies stay near 1 (the activation
divides by them), the F0 read-out lands on voice-like pitches (mostly voiced,
above the 10 Hz threshold), and the log-magnitudes ``conv_post`` predicts sit
well below the clip at 100, so the output is neither silent nor clipped at +-0.99.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from models.blocks.hift import PREFIX, HiFT

S3GEN_FILE = "s3gen_meanflow.safetensors"

GAINS = {
    "f0_predictor": 1.5,
    "conv_pre": 1.0,
    "ups": 2.0,
    "source_resblocks": 0.3,
    "resblocks": 0.3,
    "conv_post": 0.3,
}
"""Weight-norm g (mean) per module: a unit-variance input gives an output of about
this std (transposed convs spread each input over stride outputs, hence more)."""


def mel2wav_tensors(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)

    def randn(shape: torch.Size, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * scale

    def uniform(shape: torch.Size, low: float, high: float) -> torch.Tensor:
        return low + torch.rand(shape, generator=gen) * (high - low)

    out: dict[str, torch.Tensor] = {}
    for key, like in HiFT().state_dict().items():
        shape = like.shape
        module = key.split(".")[0]
        if key.endswith("original0"):  # weight-norm g
            out[key] = GAINS[module] * uniform(shape, 0.7, 1.3)
        elif key.endswith("original1"):  # weight-norm direction
            out[key] = randn(shape)
        elif key.endswith("alpha"):
            out[key] = uniform(shape, 0.5, 1.5)
        elif key == "f0_predictor.classifier.weight":
            out[key] = randn(shape, 30.0 / shape[1] ** 0.5)
        elif key == "f0_predictor.classifier.bias":
            out[key] = torch.full(shape, 100.0)
        elif key == "conv_post.bias":
            # Log-magnitudes (first 9 channels) around e^-3; phases around 0.
            out[key] = torch.cat([torch.full((9,), -3.0), torch.zeros(shape[0] - 9)])
        elif key.endswith("weight"):  # the source's convs and merge, no weight norm
            fan_in = like[0].numel()
            out[key] = randn(shape, fan_in**-0.5)
        else:  # biases
            out[key] = randn(shape, 0.02)
    return {PREFIX + k: v.contiguous() for k, v in out.items()}


def build_mel2wav(out: Path, seed: int = 0) -> Path:
    """``out/s3gen_meanflow.safetensors`` holding only the vocoder's tensors."""
    out.mkdir(parents=True, exist_ok=True)
    save_file(mel2wav_tensors(seed), str(out / S3GEN_FILE))
    return out
