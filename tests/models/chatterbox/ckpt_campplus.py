"""Random weights for S3Gen's CAM++ speaker encoder, as the ``speaker_encoder.*``
tensors of ``s3gen_meanflow.safetensors``: every key the reference's module holds
(its batch norms' running statistics and ``num_batches_tracked`` counters included),
float32, the counters int64 scalars.

Convolutions are fan-in scaled for ReLU; batch norm gains and shifts sit near 1 and
0. The running statistics are what a trained network's would be, statistics of the
activations on audio: one pass over a few seeded speech-like clips sets each norm's
mean and variance from what reaches it (earlier norms already set), then they are
jittered so that no layer normalises exactly. So activations stay near unit scale
through all 52 dense layers and the x-vector is neither tiny nor huge.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from models.chatterbox.campplus import PREFIX, CAMPPlus, Norm
from models.chatterbox.fbank import SAMPLE_RATE, xvector_features
from tests.models.chatterbox.ckpt import add_s3gen_tensors


def speechlike(seconds: float, seed: int, sr: int = SAMPLE_RATE) -> np.ndarray:
    """Float32 audio around -20 dBFS: harmonics of a wandering pitch under a
    syllable-rate envelope, noise bursts, a short pause, a little DC."""
    rng = np.random.default_rng(seed)
    n = round(seconds * sr)
    t = np.arange(n) / sr
    f0 = 120 + 35 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6)) + 10 * np.sin(9.0 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    voiced = sum(rng.uniform(0.2, 1.0) / k * np.sin(k * phase) for k in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t + rng.uniform(0, 6)) ** 2
    noise = rng.normal(size=n) * (np.sin(2 * np.pi * 1.3 * t) > 0.6)
    wav = 0.08 * voiced * envelope + 0.02 * noise + 0.003
    start = rng.integers(0, max(1, n - sr // 5))
    wav[start : start + sr // 10] = 0.0  # a pause: frames at the log floor
    return wav.astype(np.float32)


def _calibrate(model: CAMPPlus, gen: torch.Generator, clips: int = 4) -> None:
    """Set every norm's running statistics from its input on seeded clips."""

    def set_stats(module: Norm, args: tuple[torch.Tensor]) -> None:
        x = args[0].detach()
        dims = [d for d in range(x.dim()) if d != 1]
        mean = x.mean(dim=dims)
        # The embedding's norm sees one row per clip, a few: pool its variance.
        var = torch.full_like(mean, float(x.var())) if x.dim() == 2 else x.var(dim=dims)
        jitter = torch.empty_like(var).uniform_(0.8, 1.25, generator=gen)
        module.running_mean.copy_(mean + 0.05 * var.sqrt() * torch.randn(mean.shape, generator=gen))
        module.running_var.copy_((var * jitter).clamp_min(1e-4))
        module.num_batches_tracked.fill_(int(torch.randint(50_000, 500_000, (), generator=gen)))

    seed = int(torch.randint(0, 2**31 - 1, (), generator=gen))
    feats = torch.stack([xvector_features(speechlike(2.0, seed + i)) for i in range(clips)])
    handles = [
        m.register_forward_pre_hook(set_stats) for m in model.modules() if isinstance(m, Norm)
    ]
    try:
        with torch.no_grad():
            model(feats)
    finally:
        for handle in handles:
            handle.remove()


def campplus_tensors(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    model = CAMPPlus()
    with torch.no_grad():
        for name, param in model.named_parameters():
            shape = param.shape
            noise = torch.randn(shape, generator=gen)
            if ".bn" in name or "batchnorm" in name or name.endswith("shortcut.1.weight"):
                value = 1 + 0.1 * noise if name.endswith("weight") else 0.05 * noise
            elif name.endswith("bias"):  # norms' shifts, the context gate's convolutions
                value = 0.05 * noise
            else:
                value = noise * (2.0 / shape[1:].numel()) ** 0.5
            param.copy_(value)
    _calibrate(model, gen)
    return {PREFIX + k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def add_campplus_tensors(target: dict[str, torch.Tensor] | Path, seed: int) -> None:
    """Add CAM++'s tensors to a state dict (in place) or to an S3Gen safetensors file
    (a checkpoint directory's, or the file itself; created when absent, others'
    tensors kept)."""
    add_s3gen_tensors(target, campplus_tensors(seed))
