"""Random Fish Speech S2 Pro codecs in the exact on-disk form S2 Pro publishes.

``codec.pth`` in the checkpoint directory: a flat state dict written by
``torch.save`` with the keys ``fish-speech``'s ``modded_dac.DAC`` has (541 at the
real size): weight-normed convs as ``conv.parametrizations.weight.original0/1``
(the quantizer's projections as ``weight_g``/``weight_v``), every transformer's
``freqs_cis`` (bfloat16) and ``causal_mask`` (bool), everything else float32.
The reference runner loads these files into the reference's own classes
strictly, so the key layout is checked against it, not only against our modules.

Weights are scaled so the audio looks like audio (neither silent nor clipped),
and the transformers' layer scales are far from their 1e-2 initial value, so the
attention window and the positions show in the output.

    python -m tests.models.fish_speech.ckpt_codec OUT_DIR [--real]
"""

from __future__ import annotations

import argparse
import re
from dataclasses import asdict
from pathlib import Path

import torch

from models.blocks.dac import DAC, DACConfig, checkpoint_shapes
from models.blocks.dac_transformer import rope_table

CODEC_FILE = "codec.pth"

TINY = DACConfig(
    encoder_dim=8,
    encoder_rates=(2, 4, 8, 8),
    encoder_transformer_layers=(0, 0, 0, 1),
    encoder_positions=1024,
    decoder_dim=64,
    decoder_rates=(8, 8, 4, 2),
    residual_codebooks=9,
    codebook_size=64,
    semantic_codebook_size=128,
    quantizer_layers=2,
    quantizer_heads=2,
    quantizer_intermediate=384,
    quantizer_positions=512,
)
"""Every structural feature of the real codec (hop 2048, 10 codebooks, the real
attention windows) at widths a CPU runs in milliseconds: latent 128, 2 heads."""

GAINS = (
    (re.compile(r"\.block\.\d+\.block\.[13]\.conv\."), 0.4),  # residual units
    (re.compile(r"^decoder\.model\.\d+\.block\.1\.conv\."), 1.5),  # upsampling
    (re.compile(r"^decoder\.model\.6\.conv\."), 0.3),  # the last conv
)
"""Weight-norm g (per output channel) by key: about the std a unit-variance input
comes out with. Residual units' convs are small so the stacked additions stay
bounded; transposed convs spread each input over stride outputs, hence more; the
last conv lifts the audio to speech-like levels. Elsewhere 1."""


def gain(key: str) -> float:
    return next((g for pattern, g in GAINS if pattern.search(key)), 1.0)


def codec_tensors(cfg: DACConfig, seed: int) -> dict[str, torch.Tensor]:
    """Every tensor of a codec of ``cfg``'s sizes, keyed and typed as ``codec.pth``."""
    gen = torch.Generator().manual_seed(seed)

    def randn(shape: tuple[int, ...], scale: float = 1.0) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * scale

    def uniform(shape: tuple[int, ...], low: float, high: float) -> torch.Tensor:
        return low + torch.rand(shape, generator=gen) * (high - low)

    with torch.device("meta"):
        shapes = checkpoint_shapes(DAC(cfg))
    out: dict[str, torch.Tensor] = {}
    for key, shape in shapes.items():
        last = key.rsplit(".", 1)[-1]
        if last == "causal_mask":
            out[key] = torch.tril(torch.ones(shape, dtype=torch.bool))
        elif last == "freqs_cis":
            out[key] = rope_table(0, shape[0], 2 * shape[1], cfg.rope_base).to(torch.bfloat16)
        elif last in ("original0", "weight_g"):
            out[key] = gain(key) * uniform(shape, 0.6, 1.2)
        elif last in ("original1", "weight_v"):
            out[key] = randn(shape)
        elif last == "alpha":
            out[key] = uniform(shape, 0.5, 1.5)
        elif last == "gamma":  # layer scales (transformers, ConvNeXt)
            out[key] = uniform(shape, 0.1, 0.4)
        elif key.endswith("codebook.weight"):
            out[key] = randn(shape)
        elif "norm" in key and last == "weight":
            out[key] = uniform(shape, 0.8, 1.2)
        elif last == "weight":  # linears and the quantizer's plain convs
            fan_in = shape[1] * (shape[2] if len(shape) == 3 else 1)
            out[key] = randn(shape, fan_in**-0.5)
        else:  # biases
            out[key] = randn(shape, 0.02)
    return out


def build_codec(out: Path, cfg: DACConfig = TINY, seed: int = 0) -> Path:
    """``out/codec.pth`` of a random codec of ``cfg``'s sizes; returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    torch.save(codec_tensors(cfg, seed), out / CODEC_FILE)
    return out


def config_dict(cfg: DACConfig) -> dict:
    """``cfg`` as JSON for the reference runner (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--real", action="store_true", help="S2 Pro's sizes (about 2 GB)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build_codec(args.out, DACConfig() if args.real else TINY, args.seed)
    print(args.out / CODEC_FILE)


if __name__ == "__main__":
    main()
