"""VoxCPM2's ``config.json``: the shapes of its MiniCPM-4 stacks and their rotary frequencies.

Four stacks share MiniCPM-4's block (``lm_config``: the base language model; the residual
language model, the local encoder and the local DiT copy it and override their sizes,
``encoder_config``/``dit_config``): KV heads, norm epsilon and rotary positions come from
``lm_config``. Heads are ``kv_channels`` wide (not hidden / heads). Rotary positions are
LongRoPE: the usual frequencies each divided by a factor (the long factors past the
original context, else the short ones), rotated in halves.
"""

from __future__ import annotations

import math

import torch

from models.blocks.llama import TransformerConfig


def longrope_inv_freq(head_dim: int, theta: float, factors: list[float]) -> torch.Tensor:
    """MiniCPM-4's frequencies: the usual ones divided by a factor each."""
    if len(factors) != head_dim // 2:
        raise ValueError(f"LongRoPE needs {head_dim // 2} factors, got {len(factors)}")
    base = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    return base / torch.tensor(factors, dtype=torch.float32)


def rope_of(lm: dict, head_dim: int) -> tuple[torch.Tensor, float]:
    """(frequencies, cos/sin scale) of ``lm_config``'s LongRoPE for heads of ``head_dim``:
    the long factors past the original context, else the short ones."""
    scaling = lm.get("rope_scaling") or {}
    longest = lm["max_position_embeddings"]
    original = scaling.get("original_max_position_embeddings", longest)
    factors = scaling["long_factor"] if longest > original else scaling["short_factor"]
    scale = math.sqrt(1 + math.log(longest / original) / math.log(original))
    return longrope_inv_freq(head_dim, float(lm.get("rope_theta", 10000)), factors), scale


def _stack(
    lm: dict, hidden: int, ffn: int, layers: int, heads: int, head_dim: int
) -> tuple[TransformerConfig, torch.Tensor]:
    """A MiniCPM-4 stack of these sizes, with ``lm_config``'s KV heads, epsilon and
    rotary frequencies."""
    inv_freq, scale = rope_of(lm, head_dim)
    if abs(scale - 1.0) > 1e-12 or lm.get("use_mup"):
        raise ValueError("lm_config: LongRoPE scaling other than 1 and use_mup are not supported")
    cfg = TransformerConfig(
        hidden_size=hidden,
        intermediate_size=ffn,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=lm["num_key_value_heads"],
        head_dim=head_dim,
        rms_norm_eps=lm["rms_norm_eps"],
        rope_theta=float(lm.get("rope_theta", 10000)),
        qk_norm=False,
    )
    return cfg, inv_freq


def stack_config(data: dict, section: str) -> tuple[TransformerConfig, torch.Tensor]:
    """A local stack's shape and rotary frequencies from ``config.json``: its own sizes
    (``section``: ``dit_config`` or ``encoder_config``), the rest (KV heads, norm epsilon,
    rotary) from ``lm_config``."""
    own = data[section]
    head_dim = own.get("kv_channels") or own["hidden_dim"] // own["num_heads"]
    return _stack(
        data["lm_config"],
        own["hidden_dim"],
        own["ffn_dim"],
        own["num_layers"],
        own["num_heads"],
        head_dim,
    )


def lm_stack(data: dict, layers: int | None = None) -> tuple[TransformerConfig, torch.Tensor]:
    """The base language model's stack (``layers``: the residual model's count)."""
    lm = data["lm_config"]
    head_dim = lm.get("kv_channels") or lm["hidden_size"] // lm["num_attention_heads"]
    return _stack(
        lm,
        lm["hidden_size"],
        lm["intermediate_size"],
        layers or lm["num_hidden_layers"],
        lm["num_attention_heads"],
        head_dim,
    )
