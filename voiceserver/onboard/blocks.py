"""Shared building blocks recognised by their key patterns, and the stage layout they suggest.

A block is found under a prefix when its signature keys are all there: a
Llama/Qwen2/Qwen3 decoder (``layers.N.self_attn.q_proj``, ``mlp.gate_proj``, the two
norms), a GPT-2 decoder (``h.N.attn.c_attn``, ``mlp.c_fc``, ``ln_1``), a Mimi codec
(its ``decoder_transformer`` and split quantizers), a DAC-style decoder (Snake
activations with transposed convolutions), a HiFi-GAN generator (``ups``,
``resblocks``, ``conv_pre``). Sizes come from the shapes (and config.json where the
shapes cannot tell: GPT-2's head count).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from models.checkpoint import TensorInfo

BACKBONE = "backbone"
CODEC = "codec decoder"


@dataclass(frozen=True)
class Block:
    kind: str
    """``BACKBONE`` (tokens -> tokens) or ``CODEC`` (codes or features -> audio)."""
    name: str
    """``Qwen3 decoder``, ``GPT-2 decoder``, ``DAC-style decoder``..."""
    prefix: str
    """Where its keys start (``model.``, ``transformer.``, ``decoder.``)."""
    file: str
    facts: tuple[str, ...]
    """Sizes read off the shapes: layers, width, heads..."""
    layers: int = 0
    evidence: str = ""
    """The key patterns that identified it."""

    def describe(self) -> str:
        facts = ", ".join(self.facts)
        where = f"'{self.prefix}'" if self.prefix else "the top level"
        return f"{self.name} at {where} in {self.file}" + (f" ({facts})" if facts else "")


def _by_prefix(tensors: dict[str, TensorInfo], pattern: str) -> dict[str, set[int]]:
    """Prefix -> indices of keys matching ``<prefix><pattern>`` (pattern holds ``(\\d+)``)."""
    found: dict[str, set[int]] = defaultdict(set)
    regex = re.compile(r"^(.*?)" + pattern + "$")
    for key in tensors:
        match = regex.match(key)
        if match is not None:
            found[match.group(1)].add(int(match.group(2)))
    return found


def _first(
    tensors: dict[str, TensorInfo], prefix: str, layer: int, suffix: str
) -> TensorInfo | None:
    for stem in ("layers", "h"):
        info = tensors.get(f"{prefix}{stem}.{layer}.{suffix}")
        if info is not None:
            return info
    return None


def llama_decoders(
    tensors: dict[str, TensorInfo], file: str, config: dict[str, Any]
) -> list[Block]:
    out = []
    for prefix, layers in sorted(
        _by_prefix(tensors, r"layers\.(\d+)\.self_attn\.q_proj\.weight").items()
    ):
        first = min(layers)
        needed = (
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
            "input_layernorm.weight",
            "post_attention_layernorm.weight",
            "self_attn.k_proj.weight",
            "self_attn.v_proj.weight",
            "self_attn.o_proj.weight",
        )
        if any(_first(tensors, prefix, first, k) is None for k in needed):
            continue
        q = tensors[f"{prefix}layers.{first}.self_attn.q_proj.weight"].shape
        k = tensors[f"{prefix}layers.{first}.self_attn.k_proj.weight"].shape
        mlp = tensors[f"{prefix}layers.{first}.mlp.gate_proj.weight"].shape
        q_norm = tensors.get(f"{prefix}layers.{first}.self_attn.q_norm.weight")
        biased = f"{prefix}layers.{first}.self_attn.q_proj.bias" in tensors
        name = (
            "Qwen3 decoder"
            if q_norm is not None
            else "Qwen2 decoder"
            if biased
            else "Llama decoder"
        )
        head_dim = q_norm.shape[0] if q_norm is not None else _config_head_dim(config, q[0])
        facts = [f"{len(layers)} layers", f"width {q[1]}", f"MLP {mlp[0]}"]
        if head_dim:
            facts.append(
                f"{q[0] // head_dim} query heads and {k[0] // head_dim} KV heads of {head_dim}"
            )
        embed = tensors.get(f"{prefix}embed_tokens.weight")
        if embed is not None:
            facts.append(f"vocabulary {embed.shape[0]}")
        out.append(
            Block(
                BACKBONE,
                name,
                prefix,
                file,
                tuple(facts),
                len(layers),
                "layers.N.self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, input/post_attention_layernorm"
                + (", self_attn.{q,k}_norm" if q_norm is not None else "")
                + (", q_proj.bias" if biased else ""),
            )
        )
    return out


def _config_head_dim(config: dict[str, Any], query_width: int) -> int:
    """Head size from config.json (the shapes give only heads x head size)."""
    if isinstance(config.get("head_dim"), int):
        return int(config["head_dim"])
    heads = config.get("num_attention_heads")
    return query_width // heads if isinstance(heads, int) and heads else 0


def gpt2_decoders(tensors: dict[str, TensorInfo], file: str, config: dict[str, Any]) -> list[Block]:
    out = []
    for prefix, layers in sorted(_by_prefix(tensors, r"h\.(\d+)\.attn\.c_attn\.weight").items()):
        first = min(layers)
        needed = (
            "mlp.c_fc.weight",
            "mlp.c_proj.weight",
            "attn.c_proj.weight",
            "ln_1.weight",
            "ln_2.weight",
        )
        if any(f"{prefix}h.{first}.{k}" not in tensors for k in needed):
            continue
        width = tensors[f"{prefix}h.{first}.attn.c_attn.weight"].shape[0]
        facts = [f"{len(layers)} layers", f"width {width}"]
        heads = config.get("n_head")
        facts.append(
            f"{heads} heads of {width // heads}"
            if isinstance(heads, int) and heads
            else "heads not in the weights (config.json n_head)"
        )
        wpe = tensors.get(f"{prefix}wpe.weight")
        if wpe is not None:
            facts.append(f"{wpe.shape[0]} learned positions")
        wte = tensors.get(f"{prefix}wte.weight")
        if wte is not None:
            facts.append(f"vocabulary {wte.shape[0]}")
        out.append(
            Block(
                BACKBONE,
                "GPT-2 decoder",
                prefix,
                file,
                tuple(facts),
                len(layers),
                "h.N.attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj, ln_1, ln_2",
            )
        )
    return out


def mimi_codecs(tensors: dict[str, TensorInfo], file: str) -> list[Block]:
    out = []
    for prefix, layers in sorted(
        _by_prefix(
            tensors, r"decoder_transformer\.layers\.(\d+)\.self_attn\.q_proj\.weight"
        ).items()
    ):
        has_convs = any(k.startswith(f"{prefix}decoder.layers.") for k in tensors)
        quantizer = any(
            k.startswith(f"{prefix}quantizer.semantic_residual_vector_quantizer.") for k in tensors
        )
        if not (has_convs and quantizer):
            continue
        books = sum(
            1
            for k in tensors
            if k.startswith(f"{prefix}quantizer.") and k.endswith(".codebook.embed_sum")
        )
        out.append(
            Block(
                CODEC,
                "Mimi codec",
                prefix,
                file,
                (f"{len(layers)} decoder transformer layers", f"{books} codebooks"),
                len(layers),
                "decoder_transformer.layers.N, decoder.layers.N.conv, quantizer.semantic_residual_vector_quantizer",
            )
        )
    return out


def dac_decoders(tensors: dict[str, TensorInfo], file: str) -> list[Block]:
    """Snake activations (``alpha`` of shape [1, C, 1]) around transposed convolutions:
    ``block.N.conv_t1`` (Hugging Face's DacModel) or ``model.N.block.M`` (descript's)."""
    stages = {
        **_by_prefix(
            tensors,
            r"block\.(\d+)\.conv_t1\.(?:weight|weight_v|parametrizations\.weight\.original1)",
        ),
        **_by_prefix(tensors, r"model\.(\d+)\.block\.\d+\.alpha"),
    }
    out = []
    for prefix, blocks in sorted(stages.items()):
        snakes = sum(
            1
            for key, info in tensors.items()
            if key.startswith(prefix)
            and key.endswith("alpha")
            and len(info.shape) == 3
            and info.shape[0] == info.shape[2] == 1
        )
        if snakes < 3:
            continue
        out.append(
            Block(
                CODEC,
                "DAC-style decoder",
                prefix,
                file,
                (f"{len(blocks)} upsampling blocks", f"{snakes} Snake activations"),
                len(blocks),
                "block.N.conv_t1 (or model.N.block.M), *.alpha [1, C, 1] (Snake)",
            )
        )
    return out


def hifigan_generators(tensors: dict[str, TensorInfo], file: str) -> list[Block]:
    out = []
    for prefix, ups in sorted(
        _by_prefix(
            tensors, r"ups\.(\d+)\.(?:weight|weight_v|parametrizations\.weight\.original1)"
        ).items()
    ):
        resblocks = {k for k in tensors if k.startswith(f"{prefix}resblocks.")}
        pre = any(k.startswith(f"{prefix}conv_pre.") for k in tensors)
        post = any(k.startswith(f"{prefix}conv_post.") for k in tensors)
        if not (resblocks and pre and post):
            continue
        count = len({k.split(".")[len(prefix.split("."))] for k in resblocks})
        snake = any(k.startswith(prefix) and k.endswith("alpha") for k in tensors)
        name = "HiFi-GAN generator" + (" with Snake activations (BigVGAN-style)" if snake else "")
        out.append(
            Block(
                CODEC,
                name,
                prefix,
                file,
                (f"{len(ups)} upsampling layers", f"{count} residual blocks"),
                len(ups),
                "ups.N, resblocks.N.convs1, conv_pre, conv_post",
            )
        )
    return out


def find_blocks(tensors: dict[str, TensorInfo], file: str, config: dict[str, Any]) -> list[Block]:
    """Every block recognised in one file's tensors."""
    return [
        *llama_decoders(tensors, file, config),
        *gpt2_decoders(tensors, file, config),
        *mimi_codecs(tensors, file),
        *dac_decoders(tensors, file),
        *hifigan_generators(tensors, file),
    ]


def heads(tensors: dict[str, TensorInfo], file: str) -> list[str]:
    """Output projections (``lm_head``, ``*_head``): their vocabularies say what a
    backbone predicts (text tokens, codec codes, speech tokens)."""
    out = []
    for key, info in sorted(tensors.items()):
        name = key.rsplit(".", 1)[0]
        if (
            key.endswith(".weight")
            and name.split(".")[-1].endswith("head")
            and len(info.shape) == 2
        ):
            out.append(f"{key} in {file}: {info.shape[0]} outputs from width {info.shape[1]}")
    return out


def stage_layout(blocks: list[Block]) -> list[str]:
    """A guess at the AR stage and the vocoder stage, from the blocks found."""
    backbones = sorted((b for b in blocks if b.kind == BACKBONE), key=lambda b: -b.layers)
    codecs = [b for b in blocks if b.kind == CODEC]
    lines = []
    if backbones:
        main = backbones[0]
        lines.append(
            f"AR stage (a ModelRunner): the {main.name} at '{main.prefix}' turns text into "
            "tokens, one step per frame, its KV cache per slot"
        )
        for extra in backbones[1:]:
            lines.append(
                f"  a second decoder, the {extra.name} at '{extra.prefix}' ({extra.layers} layers): "
                "likely predicts the remaining codebooks of each frame (as Qwen3-TTS's code "
                "predictor does), inside the same step"
            )
    else:
        lines.append("AR stage: no decoder backbone recognised in these weights")
    if codecs:
        for codec in codecs:
            lines.append(
                f"vocoder stage (a Vocoder): the {codec.name} at '{codec.prefix}' turns the AR "
                "stage's codes or features into audio, in chunks, batched over streams"
            )
    else:
        lines.append(
            "vocoder stage: no codec or vocoder decoder in these weights; it is likely a "
            "separate checkpoint (a DAC, Mimi, SNAC or EnCodec codec, or a HiFi-GAN): run "
            "onboard on it too"
        )
    return lines
