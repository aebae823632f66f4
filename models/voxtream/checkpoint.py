"""Reading VoXtream2's weights from an unmodified checkpoint directory.

``model.safetensors`` holds the network in the reference's (torchtune's) names: per
transformer (``phone_former``, ``temp_former``, ``dep_former``) ``layers.N.attn.
{q,k,v,output}_proj``, ``mlp.w1/w2/w3`` (gate, down, up), ``sa_norm.scale``,
``mlp_norm.scale`` and ``norm.scale``; then ``phone_embeddings``, ``audio_embeddings``,
``spk_emb_proj``, ``sem_head`` and ``audio_head``. The check runs in those names from
the file's header; loading reorders the interleaved rotary pairs of q/k
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
)
from models.voxtream.config import VoxConfig, load_config
from models.voxtream.model import VoxModel

WEIGHTS = "model.safetensors"
FORMERS = {"phone_former": "phone", "temp_former": "temporal", "dep_former": "depth"}
_RENAMES = {
    "attn.q_proj.": "self_attn.q_proj.",
    "attn.k_proj.": "self_attn.k_proj.",
    "attn.v_proj.": "self_attn.v_proj.",
    "attn.output_proj.": "self_attn.o_proj.",
    "mlp.w1.": "mlp.gate_proj.",
    "mlp.w3.": "mlp.up_proj.",
    "mlp.w2.": "mlp.down_proj.",
}


def _layers(prefix: str, c: TransformerConfig) -> dict[str, tuple[int, ...]]:
    d, hd = c.hidden_size, c.head_dim
    out: dict[str, tuple[int, ...]] = {}
    for i in range(c.num_layers):
        p = f"{prefix}.layers.{i}."
        out[p + "attn.q_proj.weight"] = (c.num_heads * hd, d)
        out[p + "attn.k_proj.weight"] = (c.num_kv_heads * hd, d)
        out[p + "attn.v_proj.weight"] = (c.num_kv_heads * hd, d)
        out[p + "attn.output_proj.weight"] = (d, c.num_heads * hd)
        out[p + "mlp.w1.weight"] = (c.intermediate_size, d)
        out[p + "mlp.w3.weight"] = (c.intermediate_size, d)
        out[p + "mlp.w2.weight"] = (d, c.intermediate_size)
        out[p + "sa_norm.scale"] = (d,)
        out[p + "mlp_norm.scale"] = (d,)
    out[prefix + ".norm.scale"] = (d,)
    return out


def expected_keys(cfg: VoxConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the network, as the checkpoint names and shapes it."""
    d, v, k = cfg.embedding_dim, cfg.audio_vocab_size, cfg.num_codebooks
    out = {
        "phone_embeddings.weight": (cfg.phone_vocab_size, d),
        "audio_embeddings.weight": (v * k, d),
        "spk_emb_proj.weight": (d, cfg.spk_embedding_dim),
        "sem_head.weight": (v * cfg.num_phone_states, d),
        "audio_head": (k - 1, cfg.depth.hidden_size, v),
    }
    for prefix, which in FORMERS.items():
        out.update(_layers(prefix, getattr(cfg, which)))
    return out


def _renamed(state: dict[str, torch.Tensor], cfg: VoxConfig) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        prefix, _, rest = key.partition(".")
        if prefix not in FORMERS:
            out[key] = value
            continue
        head_dim = getattr(cfg, FORMERS[prefix]).head_dim
        if rest == "norm.scale":
            out[f"{prefix}.norm.weight"] = value
            continue
        layer, _, name = rest.partition(".")[2].partition(".")
        new = name.replace("sa_norm.scale", "input_layernorm.weight").replace(
            "mlp_norm.scale", "post_attention_layernorm.weight"
        )
        for old, renamed in _RENAMES.items():
            if name.startswith(old):
                new = renamed + name[len(old) :]
        if name.startswith(("attn.q_proj.", "attn.k_proj.")):
            value = interleaved_to_neox(value, head_dim)
        out[f"{prefix}.layers.{layer}.{new}"] = value
    return out


def load_model(
    directory: Path, cfg: VoxConfig, device: torch.device, dtype: torch.dtype
) -> VoxModel:
    path = Path(directory) / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"{WEIGHTS} is missing (the network's weights)", directory)
    found = header_shapes(read_headers([path]))
    compare(expected_keys(cfg), found, "VoXtream2", file=WEIGHTS).raise_if_bad()
    model = VoxModel(cfg)
    load_weights(model, _renamed(load_tensors([path]), cfg), "VoXtream2", file=WEIGHTS)
    return model.to(device, dtype).eval()


def check_weights(directory: Path) -> list[WeightReport]:
    """The strict check of ``model.safetensors`` against ``config.json`` (headers only)."""
    directory = Path(directory)
    cfg = load_config(directory)
    path = directory / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"{WEIGHTS} is missing (the network's weights)", directory)
    found = header_shapes(read_headers([path]))
    return [compare(expected_keys(cfg), found, "VoXtream2", file=WEIGHTS)]
