"""Real-size random weights for S3Gen's flow (``flow.*`` of ``s3gen_meanflow.safetensors``).

Shapes are our module's, which mirrors the reference's names; scales keep every
activation bounded (fan-in scaled weights, layer norms near 1, the time mixer
near the identity the reference initialises it to).
"""

from __future__ import annotations

import torch

from models.blocks.flow import Flow


def flow_tensors(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, param in Flow().state_dict().items():
        shape = param.shape
        noise = torch.randn(shape, generator=gen)
        if name.endswith("time_embed_mixer.weight"):
            half = shape[0]
            value = torch.cat((torch.eye(half), torch.zeros(half, half)), dim=1) + 0.01 * noise
        elif ".norm" in name or ".out.1." in name or "after_norm" in name or ".block.2." in name:
            value = 1 + 0.1 * noise if name.endswith("weight") else 0.02 * noise
        elif name.endswith("bias") or "pos_bias" in name:
            value = 0.02 * noise
        elif name.endswith("input_embedding.weight"):
            value = noise
        else:
            fan_in = shape[1:].numel()
            value = noise / fan_in**0.5
        out[f"flow.{name}"] = value.contiguous()
    return out
