"""Real-size random weights for the S3 speech tokenizer, as the ``tokenizer.*``
tensors of ``s3gen_meanflow.safetensors`` (104 of them, float32, the mel filterbank
and Hann window included, as the checkpoint stores them).

Scales keep the encoder's activations bounded (fan-in scaled weights, layer norms
near 1; its output is about 4 rms, a third of it a fixed offset per channel) and
FSQ's projection at about unit spread, so that its digits straddle the rounding
thresholds and the tokens vary from frame to frame (seed 7, 15 s of speech-like
audio: 238 distinct tokens of 375, none more than 7 times).
"""

from __future__ import annotations

from pathlib import Path

import torch

from models.chatterbox.s3_tokenizer import PREFIX, S3Tokenizer
from tests.models.chatterbox.ckpt import add_s3gen_tensors

PROJECTION_GAIN = 0.35
"""FSQ's projection: about this std for a unit-rms hidden vector."""


def tokenizer_tensors(seed: int) -> dict[str, torch.Tensor]:
    """Every ``tokenizer.*`` tensor, seeded; the buffers are the real ones."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, like in S3Tokenizer().state_dict().items():
        shape = like.shape
        if name in ("_mel_filters", "window"):
            value = like.clone()
        else:
            noise = torch.randn(shape, generator=gen)
            if "_ln." in name:
                value = 1 + 0.1 * noise if name.endswith("weight") else 0.02 * noise
            elif name.endswith("bias"):
                value = 0.02 * noise
            elif "project_down" in name:
                value = PROJECTION_GAIN * noise / shape[1] ** 0.5
            else:
                value = noise / shape[1:].numel() ** 0.5
        out[PREFIX + name] = value.to(like.dtype).contiguous()
    return out


def add_tokenizer_tensors(target: dict[str, torch.Tensor] | Path, seed: int) -> None:
    """Add the tokenizer's tensors to a state dict (in place) or to an S3Gen
    safetensors file (a checkpoint directory's, or the file itself; created when
    absent, others' tensors kept)."""
    add_s3gen_tensors(target, tokenizer_tensors(seed))
