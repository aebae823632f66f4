"""Random Fish Speech S2 Pro checkpoints in the exact on-disk layout S2 Pro publishes.

``config.json`` (``model_type: fish_qwen3_omni``, ``text_config`` and
``audio_decoder_config`` in Fish Speech's field names, the semantic token ids at the
top), ``model.safetensors`` with the slow transformer under ``text_model.model.*``
and the fast one under ``audio_decoder.*`` (fused ``wqkv``, ``w1/w2/w3``), a
``tokenizer.json`` (byte-level BPE over a small corpus, then S2 Pro's control tokens
and ``<|semantic:N|>`` tokens, contiguous) and ``codec.pth`` (``ckpt_codec``).

    python -m tests.models.fish_speech.ckpt OUT_DIR [--real]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from models.blocks.dac import DACConfig
from tests.models.fish_speech.ckpt_codec import TINY, build_codec

CONTROL = (
    "<|im_start|>",
    "<|im_end|>",
    "<|pad|>",
    "<|text|>",
    "<|voice|>",
    "<|interleave|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    *(f"<|speaker:{i}|>" for i in range(4)),
)
CORPUS = (
    "The quick brown fox jumps over the lazy dog. Hello world! How are you today? "
    "convert the provided text to speech reference to the following: Text: Speech: "
    "system user assistant. Numbers 0123456789, punctuation: ; - ' \" ( ) ? ! "
)
TINY_TEXT = dict(dim=64, n_layer=2, n_head=4, n_local_heads=2, head_dim=16, intermediate_size=128)
TINY_FAST = dict(dim=64, n_layer=2, n_head=4, n_local_heads=2, head_dim=16, intermediate_size=96)
REAL_TEXT = dict(
    dim=2560, n_layer=36, n_head=32, n_local_heads=8, head_dim=128, intermediate_size=9728
)
REAL_FAST = dict(
    dim=2560, n_layer=4, n_head=32, n_local_heads=8, head_dim=128, intermediate_size=9728
)


def build_tokenizer(semantic: int, vocab: int) -> Tokenizer:
    """A byte-level BPE with S2 Pro's control tokens, then ``semantic`` semantic tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([CORPUS] * 4, trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in CONTROL])
    tokenizer.add_special_tokens(
        [AddedToken(f"<|semantic:{i}|>", special=True) for i in range(semantic)]
    )
    return tokenizer


def _stack(prefix: str, shape: dict, qk_norm: bool, gen: torch.Generator) -> dict:
    d, hd, heads, kv = shape["dim"], shape["head_dim"], shape["n_head"], shape["n_local_heads"]
    inter = shape["intermediate_size"]

    def w(*size: int, scale: float) -> torch.Tensor:
        return torch.randn(size, generator=gen) * scale

    out = {}
    for i in range(shape["n_layer"]):
        p = f"{prefix}layers.{i}."
        out[p + "attention.wqkv.weight"] = w((heads + 2 * kv) * hd, d, scale=d**-0.5)
        out[p + "attention.wo.weight"] = w(d, heads * hd, scale=(heads * hd) ** -0.5)
        if qk_norm:
            out[p + "attention.q_norm.weight"] = 1 + w(hd, scale=0.2)
            out[p + "attention.k_norm.weight"] = 1 + w(hd, scale=0.2)
        out[p + "feed_forward.w1.weight"] = w(inter, d, scale=d**-0.5)
        out[p + "feed_forward.w3.weight"] = w(inter, d, scale=d**-0.5)
        out[p + "feed_forward.w2.weight"] = w(d, inter, scale=inter**-0.5)
        out[p + "attention_norm.weight"] = 1 + w(d, scale=0.2)
        out[p + "ffn_norm.weight"] = 1 + w(d, scale=0.2)
    out[prefix + "norm.weight"] = 1 + w(d, scale=0.2)
    return out


def build_checkpoint(
    out: Path, seed: int = 0, *, real: bool = False, eos_gain: float = 0.0, dtype=torch.float32
) -> Path:
    """Write a checkpoint into ``out``. ``eos_gain``: scales ``<|im_end|>``'s embedding
    row (its score grows with it, so a random model ends its turns now and then)."""
    out.mkdir(parents=True, exist_ok=True)
    codec = DACConfig() if real else TINY
    semantic, residual = codec.semantic_codebook_size, codec.residual_codebooks
    tokenizer = build_tokenizer(semantic, 300)
    tokenizer.save(str(out / "tokenizer.json"))
    text_shape, fast_shape = (REAL_TEXT, REAL_FAST) if real else (TINY_TEXT, TINY_FAST)
    begin = tokenizer.token_to_id("<|semantic:0|>")
    vocab = tokenizer.get_vocab_size() if not real else 155776
    vocab = max(vocab, begin + semantic)
    im_end = tokenizer.token_to_id("<|im_end|>")
    config = {
        "architectures": ["DualARTransformer"],
        "model_type": "fish_qwen3_omni",
        "torch_dtype": "bfloat16",
        "eos_token_id": im_end,
        "pad_token_id": tokenizer.token_to_id("<|pad|>"),
        "audio_pad_token_id": tokenizer.token_to_id("<|audio_pad|>"),
        "semantic_start_token_id": begin,
        "semantic_end_token_id": begin + semantic - 1,
        "text_config": {
            "model_type": "fish_qwen3",
            "vocab_size": vocab,
            **text_shape,
            "rope_base": 1000000.0,
            "norm_eps": 1e-6,
            "max_seq_len": 32768,
            "tie_word_embeddings": True,
            "attention_qkv_bias": False,
            "attention_o_bias": False,
            "attention_qk_norm": True,
        },
        "audio_decoder_config": {
            "model_type": "fish_qwen3_audio_decoder",
            "vocab_size": semantic,
            "num_codebooks": residual + 1,
            **fast_shape,
            "max_seq_len": residual + 2,
            "text_dim": text_shape["dim"],
            "attention_qk_norm": False,
        },
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    gen = torch.Generator().manual_seed(seed)
    d, fd = text_shape["dim"], fast_shape["dim"]
    state = {
        "text_model.model.embeddings.weight": torch.randn(vocab, d, generator=gen),
        **_stack("text_model.model.", text_shape, True, gen),
        "audio_decoder.codebook_embeddings.weight": torch.randn(
            semantic * (residual + 1), d, generator=gen
        ),
        "audio_decoder.embeddings.weight": torch.randn(semantic, fd, generator=gen),
        "audio_decoder.output.weight": torch.randn(semantic, fd, generator=gen) * fd**-0.5 * 3,
        **_stack("audio_decoder.", fast_shape, False, gen),
    }
    if eos_gain:
        state["text_model.model.embeddings.weight"][im_end] *= eos_gain
    save_file(
        {k: v.to(dtype).contiguous() for k, v in state.items()}, str(out / "model.safetensors")
    )
    build_codec(out, codec, seed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--real", action="store_true", help="S2 Pro's sizes (bf16, ~9 GB)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.real else torch.float32
    print(build_checkpoint(args.out, args.seed, real=args.real, dtype=dtype))


if __name__ == "__main__":
    main()
