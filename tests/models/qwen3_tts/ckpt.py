"""Build random Qwen3-TTS checkpoints in the exact Hugging Face on-disk format.

Writes ``config.json``, ``generation_config.json``, ``model.safetensors`` (or
shards + index), a byte-level BPE tokenizer (``vocab.json``, ``merges.txt``,
``tokenizer_config.json``) and ``speech_tokenizer/`` (config, preprocessor
config, safetensors). Tensors come from our own modules, whose state-dict
keys are the checkpoint's; the reference runner checks that it loads exactly
these tensors. ``Sizes.real("1b7")`` gives real-size shapes for benchmarks.

    python -m tests.models.qwen3_tts.ckpt OUT_DIR --variant base
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from torch import nn

from models.qwen3_tts.code2wav import Code2Wav, ResidualUnit, SnakeBeta
from models.qwen3_tts.code2wav import LayerScale as DecoderLayerScale
from models.qwen3_tts.config import parse_config, parse_speech_tokenizer_config
from models.qwen3_tts.mimi_encoder import _Codebook as EncoderCodebook
from models.qwen3_tts.mimi_encoder import _Scale as EncoderLayerScale
from models.qwen3_tts.modules import Qwen3TTSWeights, SpeechTokenizerWeights

VARIANTS = ("custom_voice", "voice_design", "base")

LANGUAGES = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "spanish": 2054,
    "japanese": 2058,
    "french": 2061,
    "sichuan_dialect": 2062,
}
SPEAKERS = {"vivian": 3065, "ryan": 3061, "dylan": 3010}
DIALECTS = {"vivian": False, "ryan": False, "dylan": "sichuan_dialect"}
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|tts_pad|>",
    "<|tts_text_bos|>",
    "<|tts_text_eod|>",
)
CORPUS = [
    "assistant",
    "user",
    "Hello world, this is a small test of the speech model.",
    "The quick brown fox jumps over the lazy dog.",
    "Speak slowly and clearly, with a warm and friendly voice.",
    "A cheerful young woman reading the news at the station.",
    "Numbers like 42 and 2026 are read one digit at a time.",
]


@dataclass(frozen=True)
class Sizes:
    hidden: int = 64
    intermediate: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    text_hidden: int = 32
    predictor_hidden: int = 32
    predictor_intermediate: int = 64
    predictor_layers: int = 2
    predictor_heads: int = 2
    predictor_kv_heads: int = 1
    predictor_head_dim: int = 16
    codebook_size: int = 2048
    decoder_hidden: int = 32
    decoder_latent: int = 32
    decoder_codebook_dim: int = 16
    decoder_layers: int = 2
    decoder_heads: int = 2
    decoder_intermediate: int = 64
    decoder_dim: int = 32
    encoder_hidden: int = 32
    encoder_filters: int = 4
    encoder_layers: int = 1
    encoder_heads: int = 2
    encoder_intermediate: int = 64
    encoder_codebook_dim: int = 16
    encoder_quantizers: int = 16
    speaker_channels: tuple[int, ...] = (32, 32, 32, 32, 96)
    speaker_attention: int = 16
    speaker_se: int = 16
    text_vocab_size: int = 0
    """0: just the trained BPE vocabulary plus special tokens."""

    @staticmethod
    def real(size: str = "1b7") -> Sizes:
        """The shapes of the published checkpoints (for benchmarks, not tests)."""
        hidden, inter = (2048, 6144) if size == "1b7" else (1024, 3072)
        return Sizes(
            hidden=hidden,
            intermediate=inter,
            layers=28,
            heads=16,
            kv_heads=8,
            head_dim=128,
            text_hidden=2048,
            predictor_hidden=1024,
            predictor_intermediate=3072,
            predictor_layers=5,
            predictor_heads=16,
            predictor_kv_heads=8,
            predictor_head_dim=128,
            decoder_hidden=512,
            decoder_latent=1024,
            decoder_codebook_dim=512,
            decoder_layers=8,
            decoder_heads=16,
            decoder_intermediate=1024,
            decoder_dim=1536,
            encoder_hidden=512,
            encoder_filters=64,
            encoder_layers=8,
            encoder_heads=8,
            encoder_intermediate=2048,
            encoder_codebook_dim=256,
            encoder_quantizers=32,
            speaker_channels=(512, 512, 512, 512, 1536),
            speaker_attention=128,
            speaker_se=128,
            text_vocab_size=151936,
        )


@dataclass(frozen=True)
class BuildOptions:
    variant: str = "custom_voice"
    size_name: str = "0b6"
    """``tts_model_size`` written to config.json (``1b7`` enables CustomVoice instructions)."""
    sizes: Sizes = Sizes()
    seed: int = 0
    shards: int = 1
    dtype: torch.dtype = torch.float32
    eos_scale: float = 1.5
    """Multiplies the codec head's EOS row: larger stops utterances earlier."""
    transformers_version: str = "4.57.3"


# -- tokenizer -----------------------------------------------------------------


def build_tokenizer(out: Path, vocab_size: int = 420) -> dict[str, int]:
    """Train a tiny byte-level BPE; returns the special tokens' ids."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        special_tokens=[],
    )
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    vocab = tok.get_vocab()
    if "assistant" not in vocab or "user" not in vocab:
        raise RuntimeError("tiny tokenizer must hold 'assistant' and 'user' as single tokens")
    tok.model.save(str(out))
    base = len(vocab)
    ids = {token: base + i for i, token in enumerate(SPECIAL_TOKENS)}
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": token,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for token, i in ids.items()
        },
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": 131072,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return ids


# -- configs ---------------------------------------------------------------------


def model_config(opts: BuildOptions, special: dict[str, int], text_vocab: int) -> dict[str, Any]:
    s = opts.sizes
    half = s.head_dim // 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    talker: dict[str, Any] = {
        "model_type": "qwen3_tts_talker",
        "vocab_size": s.codebook_size + 1024,
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": {"rope_type": "default", "mrope_section": section, "interleaved": True},
        "attention_bias": False,
        "num_code_groups": 16,
        "text_hidden_size": s.text_hidden,
        "text_vocab_size": text_vocab,
        "codec_eos_token_id": 2150,
        "codec_think_id": 2154,
        "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156,
        "codec_think_eos_id": 2157,
        "codec_pad_id": 2148,
        "codec_bos_id": 2149,
        "codec_language_id": dict(LANGUAGES),
        "spk_id": dict(SPEAKERS) if opts.variant == "custom_voice" else {},
        "spk_is_dialect": dict(DIALECTS) if opts.variant == "custom_voice" else {},
        "code_predictor_config": {
            "model_type": "qwen3_tts_talker_code_predictor",
            "vocab_size": s.codebook_size,
            "hidden_size": s.predictor_hidden,
            "intermediate_size": s.predictor_intermediate,
            "num_hidden_layers": s.predictor_layers,
            "num_attention_heads": s.predictor_heads,
            "num_key_value_heads": s.predictor_kv_heads,
            "head_dim": s.predictor_head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": 65536,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "num_code_groups": 16,
            "attention_bias": False,
        },
    }
    config: dict[str, Any] = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": opts.size_name,
        "tts_model_type": opts.variant,
        "im_start_token_id": special["<|im_start|>"],
        "im_end_token_id": special["<|im_end|>"],
        "tts_pad_token_id": special["<|tts_pad|>"],
        "tts_bos_token_id": special["<|tts_text_bos|>"],
        "tts_eos_token_id": special["<|tts_text_eod|>"],
        "talker_config": talker,
        "transformers_version": opts.transformers_version,
    }
    if opts.variant == "base":
        # The reference's speaker-encoder config takes no other keys.
        config["speaker_encoder_config"] = {
            "mel_dim": 128,
            "enc_dim": s.hidden,
            "enc_channels": list(s.speaker_channels),
            "enc_kernel_sizes": [5, 3, 3, 3, 1],
            "enc_dilations": [1, 2, 3, 4, 1],
            "enc_attention_channels": s.speaker_attention,
            "enc_res2net_scale": 8,
            "enc_se_channels": s.speaker_se,
            "sample_rate": 24000,
        }
    return config


def speech_tokenizer_config(opts: BuildOptions) -> dict[str, Any]:
    s = opts.sizes
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
        "transformers_version": opts.transformers_version,
        "decoder_config": {
            "codebook_size": s.codebook_size,
            "codebook_dim": s.decoder_codebook_dim,
            "hidden_size": s.decoder_hidden,
            "latent_dim": s.decoder_latent,
            "head_dim": s.decoder_hidden // s.decoder_heads,
            "max_position_embeddings": 8000,
            "rope_theta": 10000.0,
            "num_attention_heads": s.decoder_heads,
            "num_key_value_heads": s.decoder_heads,
            "attention_bias": False,
            "sliding_window": 72,
            "intermediate_size": s.decoder_intermediate,
            "hidden_act": "silu",
            "layer_scale_initial_scale": 0.01,
            "rms_norm_eps": 1e-5,
            "num_hidden_layers": s.decoder_layers,
            "num_quantizers": 16,
            "upsample_rates": [8, 5, 4, 3],
            "upsampling_ratios": [2, 2],
            "decoder_dim": s.decoder_dim,
            "attention_dropout": 0.0,
        },
        "encoder_config": {
            "model_type": "mimi",
            "sampling_rate": 24000,
            "frame_rate": 12.5,
            "audio_channels": 1,
            "hidden_size": s.encoder_hidden,
            "num_filters": s.encoder_filters,
            "num_residual_layers": 1,
            "upsampling_ratios": [8, 6, 5, 4],
            "kernel_size": 7,
            "last_kernel_size": 3,
            "residual_kernel_size": 3,
            "dilation_growth_rate": 2,
            "use_causal_conv": True,
            "pad_mode": "constant",
            "compress": 2,
            "trim_right_ratio": 1.0,
            "codebook_size": s.codebook_size,
            "codebook_dim": s.encoder_codebook_dim,
            "num_quantizers": s.encoder_quantizers,
            "use_conv_shortcut": False,
            "vector_quantization_hidden_dimension": s.encoder_codebook_dim,
            "num_semantic_quantizers": 1,
            "upsample_groups": s.encoder_hidden,
            "num_hidden_layers": s.encoder_layers,
            "intermediate_size": s.encoder_intermediate,
            "num_attention_heads": s.encoder_heads,
            "num_key_value_heads": s.encoder_heads,
            "head_dim": s.encoder_hidden // s.encoder_heads,
            "hidden_act": "gelu",
            "max_position_embeddings": 8000,
            "norm_eps": 1e-5,
            "use_cache": False,
            "rope_theta": 10000.0,
            "sliding_window": 250,
            "layer_scale_initial_scale": 0.01,
            "attention_bias": False,
        },
    }


GENERATION_CONFIG = {
    "do_sample": True,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_p": 1.0,
    "subtalker_top_k": 50,
    "max_new_tokens": 8192,
}


# -- weights -----------------------------------------------------------------------


def _fan_in(module: nn.Module) -> int:
    if isinstance(module, nn.ConvTranspose1d):
        return module.in_channels * module.kernel_size[0] // module.stride[0]
    if isinstance(module, nn.Conv1d):
        return module.in_channels // module.groups * module.kernel_size[0]
    assert isinstance(module, nn.Linear)
    return module.in_features


@torch.no_grad()
def randomize(module: nn.Module, gen: torch.Generator, gain: float = 1.0) -> None:
    """Fan-in scaled init that keeps signals alive through deep random stacks."""
    for sub in module.modules():
        if isinstance(sub, nn.Linear | nn.Conv1d | nn.ConvTranspose1d):
            std = gain / math.sqrt(_fan_in(sub))
            sub.weight.copy_(torch.randn(sub.weight.shape, generator=gen) * std)
            if sub.bias is not None:
                sub.bias.copy_(torch.randn(sub.bias.shape, generator=gen) * 0.02)
        elif isinstance(sub, nn.Embedding):
            sub.weight.copy_(torch.randn(sub.weight.shape, generator=gen))
        elif isinstance(sub, nn.LayerNorm):
            sub.weight.copy_(1 + 0.1 * torch.randn(sub.weight.shape, generator=gen))
            sub.bias.copy_(0.02 * torch.randn(sub.bias.shape, generator=gen))
        elif isinstance(sub, SnakeBeta):
            sub.alpha.copy_(0.1 * torch.randn(sub.alpha.shape, generator=gen))
            sub.beta.copy_(0.1 * torch.randn(sub.beta.shape, generator=gen))
        elif isinstance(sub, DecoderLayerScale | EncoderLayerScale):
            sub.scale.fill_(0.3)
        elif isinstance(sub, EncoderCodebook):
            sub.embed_sum.copy_(torch.randn(sub.embed_sum.shape, generator=gen))
            sub.cluster_usage.copy_(0.5 + torch.rand(sub.cluster_usage.shape, generator=gen))
        elif type(sub).__name__ == "Codebook":
            sub.embedding_sum.copy_(0.25 * torch.randn(sub.embedding_sum.shape, generator=gen))
            sub.cluster_usage.copy_(0.5 + torch.rand(sub.cluster_usage.shape, generator=gen))
        elif type(sub).__name__ == "RMSNorm":
            sub.weight.copy_(1 + 0.1 * torch.randn(sub.weight.shape, generator=gen))
        elif type(sub).__name__ == "ConvNeXtBlock":
            sub.gamma.fill_(0.3)
    for sub in module.modules():
        # Tame the residual branches and the output so the random decoder neither
        # saturates nor amplifies rounding noise.
        if isinstance(sub, ResidualUnit):
            sub.conv2.conv.weight.mul_(0.3)
        elif isinstance(sub, Code2Wav):
            sub.decoder[-1].conv.weight.mul_(0.08)


def _save(tensors: dict[str, torch.Tensor], out: Path, shards: int, dtype: torch.dtype) -> None:
    tensors = {k: v.detach().to(dtype).contiguous() for k, v in tensors.items()}
    meta = {"format": "pt"}
    if shards <= 1:
        save_file(tensors, str(out / "model.safetensors"), metadata=meta)
        return
    keys = sorted(tensors)
    weight_map: dict[str, str] = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in keys[i::shards]}
        save_file(part, str(out / name), metadata=meta)
        weight_map.update(dict.fromkeys(part, name))
    total = sum(v.numel() * v.element_size() for v in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def build_checkpoint(out: Path, opts: BuildOptions = BuildOptions()) -> Path:
    """Write a complete checkpoint directory at ``out`` and return it."""
    if opts.variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}")
    out.mkdir(parents=True, exist_ok=True)
    special = build_tokenizer(out)
    text_vocab = opts.sizes.text_vocab_size or max(special.values()) + 1
    config = model_config(opts, special, text_vocab)
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))

    gen = torch.Generator().manual_seed(opts.seed)
    weights = Qwen3TTSWeights(parse_config(config))
    randomize(weights, gen)
    with torch.no_grad():
        head = weights.talker.codec_head.weight
        head[2150] *= opts.eos_scale
    _save(weights.state_dict(), out, opts.shards, opts.dtype)

    st_dir = out / "speech_tokenizer"
    st_dir.mkdir(exist_ok=True)
    st_config = speech_tokenizer_config(opts)
    (st_dir / "config.json").write_text(json.dumps(st_config, indent=2), encoding="utf-8")
    feature = {
        "feature_extractor_type": "EncodecFeatureExtractor",
        "feature_size": 1,
        "sampling_rate": 24000,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": True,
        "chunk_length_s": None,
        "overlap": None,
    }
    (st_dir / "preprocessor_config.json").write_text(json.dumps(feature, indent=2))
    st_weights = SpeechTokenizerWeights(parse_speech_tokenizer_config(st_config))
    randomize(st_weights, gen)
    _save(st_weights.state_dict(), st_dir, 1, opts.dtype)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--variant", choices=VARIANTS, default="custom_voice")
    parser.add_argument("--real", choices=("0b6", "1b7"), help="real-size shapes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    opts = BuildOptions(variant=args.variant, seed=args.seed, shards=args.shards)
    if args.real:
        opts = replace(opts, sizes=Sizes.real(args.real), size_name=args.real)
    if args.bf16:
        opts = replace(opts, dtype=torch.bfloat16)
    print(build_checkpoint(args.out, opts))


if __name__ == "__main__":
    main()
