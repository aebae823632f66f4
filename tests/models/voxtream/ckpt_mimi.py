"""Random Mimi codecs in the exact on-disk form Kyutai publishes.

``tokenizer-e351c8d8-checkpoint125.safetensors``: a flat safetensors file of float32
tensors keyed as ``moshi`` names Mimi's state, with the attention projections under
the names the published file uses (``self_attn.in_proj_weight``,
``self_attn.out_proj.weight``; moshi's load hook maps them to ``in_projs.0.weight``)
and every codebook as ``_codebook.embedding_sum``, ``cluster_usage`` and
``_initialized``. The reference runner loads these files with moshi's own
``get_mimi`` (a strict ``load_state_dict``), so the layout is checked against moshi,
not only against our modules.

Weights are scaled so the audio looks like audio (neither silent nor clipped), and
the transformers' layer scales are far from their 0.01 initial value, so the
attention context and the positions show in the output.

    python -m tests.models.voxtream.ckpt_mimi OUT_DIR [--real]
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from models.blocks.mimi import MIMI_FILE, MimiConfig, checkpoint_shapes

TINY = MimiConfig(
    dimension=32,
    n_filters=4,
    num_layers=2,
    dim_feedforward=64,
    codebook_dim=16,
)
"""Every structural feature of the published codec (ratios 8, 6, 5, 4 and stride 2:
1920 samples a frame; 32 codebooks of 2048; 8 heads; a 250-step context) at widths a
CPU runs in milliseconds: latents 32 wide (heads of 4), SEANet from 4 filters."""

GAINS = (
    (re.compile(r"\.block\.3\.conv\.conv\.weight$"), 0.3),  # residual branches
    (re.compile(r"\.convtr\.convtr\.weight$"), 1.4),  # transposed convs
    (re.compile(r"^decoder\.model\.14\.conv\.conv\.weight$"), 0.4),  # the last conv
)
"""Std of a unit-variance input's output, by key (else 1): small residual branches keep
the stacked additions bounded, transposed convs spread each input over stride outputs,
the last conv brings the audio to speech-like levels."""


def _fan_in(key: str, shape: tuple[int, ...]) -> int:
    """Inputs behind one output: a transposed conv ([in, out, kernel], stride half the
    kernel) sums kernel / 2 steps of each input channel, the depthwise upsample's of
    one channel only."""
    if key.startswith("upsample."):
        return shape[2] // 2
    if ".convtr." in key:
        return shape[0] * shape[2] // 2
    return math.prod(shape[1:])


def mimi_tensors(cfg: MimiConfig = TINY, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random Mimi state of ``cfg``, keys as the published file spells them."""
    gen = torch.Generator().manual_seed(seed)

    def normal(shape: tuple[int, ...], std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * std

    out: dict[str, torch.Tensor] = {}
    for key, shape in checkpoint_shapes(cfg).items():
        if key.endswith("_codebook._initialized"):
            value = torch.ones(shape)
        elif key.endswith("_codebook.cluster_usage"):
            value = 0.5 + torch.rand(shape, generator=gen)
        elif key.endswith("_codebook.embedding_sum"):
            usage_key = key.replace("embedding_sum", "cluster_usage")
            usage = out.get(usage_key)
            value = normal(shape, 1.0) * (usage[:, None] if usage is not None else 1.0)
        elif key.endswith(("norm1.weight", "norm2.weight")):
            value = 1 + normal(shape, 0.1)
        elif key.endswith(("norm1.bias", "norm2.bias")):
            value = normal(shape, 0.02)
        elif ".layer_scale_" in key:
            value = torch.full(shape, 0.3)
        elif key.endswith(".bias"):
            value = normal(shape, 0.02)
        else:
            gain = next((g for pattern, g in GAINS if pattern.search(key)), 1.0)
            value = normal(shape, gain / math.sqrt(_fan_in(key, shape)))
        out[key] = value.float().contiguous()
    return out


def moshi_config(cfg: MimiConfig) -> dict[str, Any]:
    """``cfg`` as the ``mimi_config`` dict ``moshi.models.loaders.get_mimi`` takes."""
    seanet = {
        "channels": cfg.channels,
        "dimension": cfg.dimension,
        "causal": True,
        "n_filters": cfg.n_filters,
        "n_residual_layers": cfg.n_residual_layers,
        "activation": "ELU",
        "compress": cfg.compress,
        "dilation_base": cfg.dilation_base,
        "disable_norm_outer_blocks": 0,
        "kernel_size": cfg.kernel_size,
        "residual_kernel_size": cfg.residual_kernel_size,
        "last_kernel_size": cfg.last_kernel_size,
        "norm": "none",
        "pad_mode": "constant",
        "ratios": list(cfg.ratios),
        "true_skip": True,
    }
    return {
        "sample_rate": cfg.sample_rate,
        "channels": cfg.channels,
        "frame_rate": cfg.frame_rate,
        "seanet": seanet,
        "quantizer": {
            "dimension": cfg.codebook_dim,
            "n_q": cfg.total_codebooks,
            "bins": cfg.codebook_size,
            "input_dimension": cfg.dimension,
            "output_dimension": cfg.dimension,
        },
        "transformer": {
            "d_model": cfg.dimension,
            "num_heads": cfg.num_heads,
            "num_layers": cfg.num_layers,
            "causal": True,
            "layer_scale": 0.01,
            "context": cfg.context,
            "conv_layout": True,
            "max_period": cfg.max_period,
            "gating": "none",
            "norm": "layer_norm",
            "positional_embedding": "rope",
            "dim_feedforward": cfg.dim_feedforward,
            "input_dimension": cfg.dimension,
            "output_dimensions": [cfg.dimension],
        },
    }


def build_mimi(out: Path, cfg: MimiConfig = TINY, seed: int = 0) -> Path:
    """Write ``out/<the published file name>`` and return its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / MIMI_FILE
    save_file(mimi_tensors(cfg, seed), str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--real", action="store_true", help="the published sizes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = MimiConfig() if args.real else TINY
    path = build_mimi(args.out, cfg, args.seed)
    print(f"{path} ({asdict(cfg)})")


if __name__ == "__main__":
    main()
