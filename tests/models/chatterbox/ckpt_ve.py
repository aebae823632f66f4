"""A random ``ve.safetensors`` in the on-disk format of ``ResembleAI/chatterbox-turbo``.

The reference ``VoiceEncoder``'s state dict: a 3-layer ``nn.LSTM`` (40 mel bins
in, 256 hidden; per layer ``weight_ih_l{k}`` [1024, in], ``weight_hh_l{k}``
[1024, 256], ``bias_ih_l{k}`` and ``bias_hh_l{k}`` [1024], gates stacked i, f,
g, o), ``proj`` (256 -> 256) and the scalar ``similarity_weight`` and
``similarity_bias`` [1], all float32. Values are drawn as PyTorch initialises
these layers (uniform in +-1/sqrt(256)), seeded.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

MELS, HIDDEN, LAYERS, EMBED = 40, 256, 3, 256


def ve_tensors(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    bound = HIDDEN**-0.5

    def uniform(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=gen) * 2 - 1) * bound

    out: dict[str, torch.Tensor] = {}
    for k in range(LAYERS):
        width = MELS if k == 0 else HIDDEN
        out[f"lstm.weight_ih_l{k}"] = uniform(4 * HIDDEN, width)
        out[f"lstm.weight_hh_l{k}"] = uniform(4 * HIDDEN, HIDDEN)
        out[f"lstm.bias_ih_l{k}"] = uniform(4 * HIDDEN)
        out[f"lstm.bias_hh_l{k}"] = uniform(4 * HIDDEN)
    out["proj.weight"] = uniform(EMBED, HIDDEN)
    out["proj.bias"] = uniform(EMBED)
    out["similarity_weight"] = torch.tensor([10.0])
    out["similarity_bias"] = torch.tensor([-5.0])
    return {k: v.float().contiguous() for k, v in out.items()}


def build_ve(directory: Path, seed: int = 0) -> Path:
    """``directory`` holding a random ``ve.safetensors``; returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file(ve_tensors(seed), str(directory / "ve.safetensors"))
    return directory
