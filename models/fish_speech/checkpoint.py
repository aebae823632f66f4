"""Reading the dual AR's weights from an unmodified Fish Speech S2 Pro directory.

``model.safetensors`` (or the shards ``model.safetensors.index.json`` lists) holds
the slow transformer under ``text_model.model.*`` and the fast one under
``audio_decoder.*`` (the slow one's codebook embeddings too), in the reference's
names: fused ``attention.wqkv``, ``attention.wo``, ``feed_forward.w1/w2/w3``,
``attention_norm``/``ffn_norm``. The check runs in those names, from the files'
headers; loading then splits ``wqkv``, reorders the interleaved rotary pairs
(``models.blocks.llama.interleaved_to_neox``) and renames into the kit's decoder.
"""

from __future__ import annotations

from pathlib import Path

import torch

from models.blocks.llama import TransformerConfig, interleaved_to_neox
from models.checkpoint import (
    CheckpointError,
    WeightReport,
    compare,
    header_shapes,
    load_tensors,
    load_weights,
    read_headers,
    safetensors_files,
)
from models.fish_speech.config import FishConfig
from models.fish_speech.model import FastAR, SlowAR

SLOW, FAST = "text_model.model.", "audio_decoder."
_RENAMES = {
    "attention.wo.": "self_attn.o_proj.",
    "attention.q_norm.": "self_attn.q_norm.",
    "attention.k_norm.": "self_attn.k_norm.",
    "feed_forward.w1.": "mlp.gate_proj.",
    "feed_forward.w3.": "mlp.up_proj.",
    "feed_forward.w2.": "mlp.down_proj.",
    "attention_norm.": "input_layernorm.",
    "ffn_norm.": "post_attention_layernorm.",
}


def _layers(prefix: str, c: TransformerConfig) -> dict[str, tuple[int, ...]]:
    d, hd = c.hidden_size, c.head_dim
    out: dict[str, tuple[int, ...]] = {}
    for i in range(c.num_layers):
        p = f"{prefix}layers.{i}."
        out[p + "attention.wqkv.weight"] = ((c.num_heads + 2 * c.num_kv_heads) * hd, d)
        out[p + "attention.wo.weight"] = (d, c.num_heads * hd)
        if c.qk_norm:
            out[p + "attention.q_norm.weight"] = (hd,)
            out[p + "attention.k_norm.weight"] = (hd,)
        out[p + "feed_forward.w1.weight"] = (c.intermediate_size, d)
        out[p + "feed_forward.w3.weight"] = (c.intermediate_size, d)
        out[p + "feed_forward.w2.weight"] = (d, c.intermediate_size)
        out[p + "attention_norm.weight"] = (d,)
        out[p + "ffn_norm.weight"] = (d,)
    out[prefix + "norm.weight"] = (d,)
    return out


def expected_keys(cfg: FishConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the dual AR, as the checkpoint names and shapes it."""
    d, fd, cs = cfg.slow.hidden_size, cfg.fast.hidden_size, cfg.codebook_size
    out = {SLOW + "embeddings.weight": (cfg.vocab_size, d), **_layers(SLOW, cfg.slow)}
    if not cfg.tie_word_embeddings:
        out[SLOW + "output.weight"] = (cfg.vocab_size, d)
    out[FAST + "codebook_embeddings.weight"] = (cs * cfg.num_codebooks, d)
    out[FAST + "embeddings.weight"] = (cs, fd)
    out[FAST + "output.weight"] = (cs, fd)
    out.update(_layers(FAST, cfg.fast))
    if fd != d:
        out[FAST + "project_in.weight"] = (fd, d)
        out[FAST + "project_in.bias"] = (fd,)
    return out


def _stack_state(
    state: dict[str, torch.Tensor], prefix: str, c: TransformerConfig
) -> dict[str, torch.Tensor]:
    """The kit decoder's ``model.*`` tensors from the checkpoint's under ``prefix``."""
    out: dict[str, torch.Tensor] = {"model.norm.weight": state[prefix + "norm.weight"]}
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    for i in range(c.num_layers):
        src, dst = f"{prefix}layers.{i}.", f"model.layers.{i}."
        wq, wk, wv = state[src + "attention.wqkv.weight"].split((q, kv, kv))
        out[dst + "self_attn.q_proj.weight"] = interleaved_to_neox(wq, c.head_dim)
        out[dst + "self_attn.k_proj.weight"] = interleaved_to_neox(wk, c.head_dim)
        out[dst + "self_attn.v_proj.weight"] = wv
        for old, new in _RENAMES.items():
            key = src + old + "weight"
            if key in state:
                value = state[key]
                if "_norm." in old and "attention." in old:  # q/k norms follow the rows
                    value = interleaved_to_neox(value, c.head_dim)
                out[dst + new + "weight"] = value
    return out


def load_dual_ar(
    directory: Path, cfg: FishConfig, im_end: int, device: torch.device, dtype: torch.dtype
) -> tuple[SlowAR, FastAR]:
    files = safetensors_files(Path(directory))
    found = header_shapes(read_headers(files))
    report = compare(expected_keys(cfg), found, "dual AR", file=", ".join(f.name for f in files))
    report.raise_if_bad()
    state = load_tensors(files, (SLOW, FAST))
    slow, fast = SlowAR(cfg, im_end), FastAR(cfg)
    slow_state = {
        "embeddings.weight": state[SLOW + "embeddings.weight"],
        "codebook_embeddings.weight": state[FAST + "codebook_embeddings.weight"],
        **_stack_state(state, SLOW, cfg.slow),
    }
    if not cfg.tie_word_embeddings:
        slow_state["output.weight"] = state[SLOW + "output.weight"]
    fast_state = {
        "embeddings.weight": state[FAST + "embeddings.weight"],
        "output.weight": state[FAST + "output.weight"],
        **_stack_state(state, FAST, cfg.fast),
    }
    if cfg.fast.hidden_size != cfg.slow.hidden_size:
        fast_state["fast_project_in.weight"] = state[FAST + "project_in.weight"]
        fast_state["fast_project_in.bias"] = state[FAST + "project_in.bias"]
    load_weights(slow, slow_state, "slow AR")
    load_weights(fast, fast_state, "fast AR")
    slow, fast = slow.to(device, dtype).eval(), fast.to(device, dtype).eval()
    slow.freeze_head()
    return slow, fast


def check_weights(directory: Path) -> list[WeightReport]:
    """The strict check of the dual AR's files against the config (from headers) and of
    ``codec.pth`` against the codec its tensors describe (memory-mapped, not read)."""
    from models.blocks.dac import DAC, checkpoint_shapes, config_from_shapes
    from models.blocks.dac_file import CODEC_FILE, read_codec_state
    from models.fish_speech.config import load_config

    directory = Path(directory)
    cfg = load_config(directory)
    files = safetensors_files(directory)
    found = header_shapes(read_headers(files))
    if not any(k.startswith((SLOW, FAST)) for k in found):
        raise CheckpointError("no text_model.* / audio_decoder.* tensors", directory)
    ar = compare(expected_keys(cfg), found, "dual AR", file=", ".join(f.name for f in files))
    codec = {k: tuple(v.shape) for k, v in read_codec_state(directory).items()}
    with torch.device("meta"):
        expected = checkpoint_shapes(DAC(config_from_shapes(codec, CODEC_FILE)))
    return [ar, compare(expected, codec, "codec", file=CODEC_FILE)]
