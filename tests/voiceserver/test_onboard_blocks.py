"""The shared blocks ``voiceserver onboard`` recognises by key patterns, on header-only
files spelled as Hugging Face's (and the reference implementations') state dicts are."""

from __future__ import annotations

from pathlib import Path

from models.checkpoint import read_header
from tests.models.real_size import write_header_only
from voiceserver.onboard.blocks import BACKBONE, CODEC, find_blocks, stage_layout

Shapes = dict[str, tuple[int, ...]]


def llama(prefix: str, layers: int, width: int, qwen3: bool = False) -> Shapes:
    """LlamaForCausalLM's (Qwen3ForCausalLM's with q/k norms) decoder: 4 heads of 16,
    2 KV heads."""
    out: Shapes = {f"{prefix}embed_tokens.weight": (100, width), f"{prefix}norm.weight": (width,)}
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        out |= {
            p + "self_attn.q_proj.weight": (64, width),
            p + "self_attn.k_proj.weight": (32, width),
            p + "self_attn.v_proj.weight": (32, width),
            p + "self_attn.o_proj.weight": (width, 64),
            p + "mlp.gate_proj.weight": (4 * width, width),
            p + "mlp.up_proj.weight": (4 * width, width),
            p + "mlp.down_proj.weight": (width, 4 * width),
            p + "input_layernorm.weight": (width,),
            p + "post_attention_layernorm.weight": (width,),
        }
        if qwen3:
            out |= {p + "self_attn.q_norm.weight": (16,), p + "self_attn.k_norm.weight": (16,)}
    return out


def dac_decoder(prefix: str, channels: int = 32, latent: int = 16, strides=(4, 2)) -> Shapes:  # type: ignore[no-untyped-def]
    """Hugging Face DacModel's decoder (checked against transformers 4.57's state dict)."""
    out: Shapes = {
        f"{prefix}conv1.weight": (channels, latent, 7),
        f"{prefix}conv1.bias": (channels,),
    }
    c = channels
    for i, stride in enumerate(strides):
        p = f"{prefix}block.{i}."
        out |= {
            p + "snake1.alpha": (1, c, 1),
            p + "conv_t1.weight": (c, c // 2, 2 * stride),
            p + "conv_t1.bias": (c // 2,),
        }
        c //= 2
        for unit in (1, 2, 3):
            r = f"{p}res_unit{unit}."
            out |= {
                r + "snake1.alpha": (1, c, 1),
                r + "conv1.weight": (c, c, 7),
                r + "conv1.bias": (c,),
                r + "snake2.alpha": (1, c, 1),
                r + "conv2.weight": (c, c, 1),
                r + "conv2.bias": (c,),
            }
    out |= {
        f"{prefix}snake1.alpha": (1, c, 1),
        f"{prefix}conv2.weight": (1, c, 7),
        f"{prefix}conv2.bias": (1,),
    }
    return out


def mimi(layers: int = 2) -> Shapes:
    """Hugging Face MimiModel's decoder side and quantizer (a few of its keys)."""
    out: Shapes = {
        "decoder.layers.0.conv.weight": (64, 32, 7),
        "decoder.layers.2.block.1.conv.weight": (16, 32, 3),
        "upsample.conv.weight": (32, 1, 4),
        "quantizer.semantic_residual_vector_quantizer.input_proj.weight": (16, 32, 1),
        "quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum": (64, 16),
    }
    for i in range(3):
        key = f"quantizer.acoustic_residual_vector_quantizer.layers.{i}.codebook.embed_sum"
        out[key] = (64, 16)
    for i in range(layers):
        p = f"decoder_transformer.layers.{i}."
        out |= {p + f"self_attn.{n}_proj.weight": (32, 32) for n in "qkvo"}
        out[p + "mlp.fc1.weight"] = (64, 32)
    return out


def hifigan(prefix: str, ups: int = 3) -> Shapes:
    out: Shapes = {f"{prefix}conv_pre.weight": (64, 80, 7), f"{prefix}conv_post.weight": (1, 8, 7)}
    for i in range(ups):
        out[f"{prefix}ups.{i}.weight"] = (64 >> i, 32 >> i, 16)
        for j in range(3):
            for k in range(3):
                out[f"{prefix}resblocks.{3 * i + j}.convs1.{k}.weight"] = (32 >> i, 32 >> i, 3)
    return out


def blocks_of(tmp_path: Path, shapes: Shapes, config: dict | None = None):  # type: ignore[no-untyped-def]
    path = write_header_only(tmp_path / "model.safetensors", shapes)
    return find_blocks(read_header(path), "model.safetensors", config or {})


def test_decoder_backbones_and_their_sizes(tmp_path: Path) -> None:
    (llama_block,) = blocks_of(tmp_path, llama("model.", 3, 48))
    assert (llama_block.kind, llama_block.name, llama_block.prefix) == (
        BACKBONE,
        "Llama decoder",
        "model.",
    )
    # Without q_norm the head size comes from config.json.
    assert "3 layers" in llama_block.facts and "width 48" in llama_block.facts
    (with_config,) = blocks_of(tmp_path, llama("model.", 3, 48), {"num_attention_heads": 4})
    assert "4 query heads and 2 KV heads of 16" in with_config.facts
    (qwen3,) = blocks_of(tmp_path, llama("talker.model.", 2, 32, qwen3=True))
    assert qwen3.name == "Qwen3 decoder" and qwen3.prefix == "talker.model."
    assert "4 query heads and 2 KV heads of 16" in qwen3.facts


def test_codec_decoders(tmp_path: Path) -> None:
    (dac,) = blocks_of(tmp_path, dac_decoder("decoder."))
    assert (dac.kind, dac.name, dac.prefix) == (CODEC, "DAC-style decoder", "decoder.")
    assert "2 upsampling blocks" in dac.facts
    (codec,) = blocks_of(tmp_path, mimi())
    assert codec.name == "Mimi codec" and "4 codebooks" in codec.facts
    (generator,) = blocks_of(tmp_path, hifigan("mel2wav."))
    assert generator.name == "HiFi-GAN generator" and "3 upsampling layers" in generator.facts


def test_the_stage_layout_pairs_a_backbone_with_a_decoder(tmp_path: Path) -> None:
    shapes = (
        llama("lm.model.", 4, 32) | llama("lm.predictor.", 1, 32) | dac_decoder("codec.decoder.")
    )
    blocks = blocks_of(tmp_path, shapes)
    assert {(b.kind, b.prefix) for b in blocks} == {
        (BACKBONE, "lm.model."),
        (BACKBONE, "lm.predictor."),
        (CODEC, "codec.decoder."),
    }
    layout = stage_layout(blocks)
    assert layout[0].startswith("AR stage (a ModelRunner): the Llama decoder at 'lm.model.'")
    assert "a second decoder" in layout[1] and "'lm.predictor.'" in layout[1]
    assert layout[2].startswith(
        "vocoder stage (a Vocoder): the DAC-style decoder at 'codec.decoder.'"
    )


def test_nothing_recognised_is_said(tmp_path: Path) -> None:
    assert blocks_of(tmp_path, {"encoder.conv.weight": (4, 4, 3)}) == []
    assert stage_layout([])[0] == "AR stage: no decoder backbone recognised in these weights"
