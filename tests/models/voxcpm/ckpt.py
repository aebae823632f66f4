"""Tiny random VoxCPM2 checkpoints in the exact on-disk form voxcpm==2.0.3 reads.

A directory as published (``openbmb/VoxCPM2``): ``config.json`` (the released fields),
the tokenizer files (``tokenizer.json``, ``tokenizer_config.json``,
``special_tokens_map.json``), ``model.safetensors`` (every key of the reference's
``VoxCPM2Model`` but the AudioVAE's) and ``audiovae.pth`` (``{"state_dict": ...}``: the
AudioVAE V2's keys, fp32, the int32 ``decoder.sr_bin_boundaries`` buffer included).

The tiny model keeps everything that decides the geometry: patch size 4, the VAE's rates
(640 input samples a latent at 16 kHz, 1920 output samples at 48 kHz, so a patch is
7680 samples), its sample-rate buckets, depthwise convolutions, FSQ, a RoPE-less residual
LM, non-square attention (heads x kv_channels != hidden) and grouped KV heads. Every
parameter is random, the norms' weights, Snake alphas, weight-norm magnitudes and
sample-rate scales included (their defaults of ones and zeros would hide bugs); scaled so
a decode is neither silent nor clipped. ``dtype`` is float32, for fp32 parity.

The tokenizer is a small Llama-style BPE (MiniCPM-4's kind: "▁" for spaces, byte
fallback) covering English text, with the audio tokens at the released ids 101-104 and
a few Chinese pieces, so the reference's Chinese split wrapper has work to do.

``real``: the released shapes (2.29 B + 94 M parameters, bf16 like the release) and
config, with random weights, for GPU benchmarks; its tokenizer is the tiny one.

    python -m tests.models.voxcpm.ckpt OUT_DIR [--real] [--seed N]
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

SPECIALS = ["<unk>", "<s>", "</s>"]
AUDIO_TOKENS = [
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_prompt_start|>",
    "<|audio_prompt_end|>",
]
"""At the released ids 101-104 (the reference hard-codes them)."""
CHARS = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    ".,!?;:'\"-()$%&/*+=@#_[]<>|~`^{}\\"
)
CJK = "你好世界我们"
MERGES = [
    ("▁", "t"),
    ("h", "e"),
    ("▁t", "he"),
    ("▁", "a"),
    ("i", "n"),
    ("e", "r"),
    ("o", "n"),
    ("r", "e"),
    ("a", "n"),
    ("o", "u"),
    ("▁", "s"),
    ("▁", "w"),
    ("▁", "i"),
    ("▁", "o"),
    ("▁", "b"),
    ("▁", "c"),
    ("▁", "h"),
    ("▁", "f"),
    ("▁", "m"),
    ("▁", "d"),
    ("▁", "p"),
    ("in", "g"),
    ("n", "d"),
    ("a", "t"),
    ("i", "s"),
    ("e", "n"),
    ("o", "r"),
    ("l", "l"),
    ("▁t", "o"),
    ("▁a", "nd"),
    ("▁o", "f"),
    ("▁i", "s"),
    ("▁i", "n"),
    ("▁", "H"),
    ("▁H", "e"),
    ("▁He", "ll"),
    ("▁Hell", "o"),
    ("▁", "T"),
    ("▁T", "he"),
    ("▁w", "or"),
    ("▁wor", "l"),
    ("▁worl", "d"),
    ("▁s", "t"),
    ("e", "d"),
    ("▁", "1"),
    ("▁", "2"),
    ("你", "好"),
    ("世", "界"),
    ("我", "们"),
    ("▁", "你好"),
]

ROPE_RELEASED = [
    0.9977997200264581, 1.014658295992452, 1.0349680404997148, 1.059429246056193,
    1.0888815016813513, 1.1243301355211495, 1.166977103606075, 1.2182568066927284,
    1.2798772354275727, 1.3538666751582975, 1.4426259039919596, 1.5489853358570191,
    1.6762658237220625, 1.8283407612492941, 2.0096956085876183, 2.225478927469756,
    2.481536379650452, 2.784415934557119, 3.1413289096347365, 3.560047844772632,
    4.048719380066383, 4.615569542115128, 5.2684819496549835, 6.014438591970396,
    6.858830049237097, 7.804668263503327, 8.851768731513417, 9.99600492938444,
    11.228766118181639, 12.536757560834843, 13.902257701387796, 15.303885189125953,
    16.717837610115794, 18.119465097853947, 19.484965238406907, 20.792956681060105,
    22.02571786985731, 23.16995406772833, 24.217054535738416, 25.16289275000465,
    26.007284207271347, 26.753240849586767, 27.40615325712662, 27.973003419175363,
    28.461674954469114, 28.880393889607006, 29.237306864684626, 29.540186419591297,
    29.79624387177199, 30.01202719065413, 30.193382037992453, 30.34545697551969,
    30.47273746338473, 30.579096895249787, 30.66785612408345, 30.741845563814174,
    30.80346599254902, 30.85474569563567, 30.897392663720595, 30.932841297560394,
    30.962293553185553, 30.986754758742034, 31.007064503249293, 31.02392307921529,
]  # fmt: skip
"""openbmb/VoxCPM2's LongRoPE factors (long and short alike), one per head-dim pair."""

VAE_BRANCH = (0.2, 0.45)
VAE_OUT = (0.15, 0.15)
VAE_MU = (3.0, 5.0)
"""Weight-norm magnitudes of the VAE's residual branches, of its last conv (before Tanh)
and of the encoder's mu head: a decode of the tiny model's patches lands well inside
(-1, 1), and a clip at speech level encodes to latents of about unit size."""
STOP_GAIN = 3.0
"""The stop predictor's scale: its two logits lie about one apart, far from a tie that
float error could flip (at 0.6 they were a few hundredths apart)."""
CFM = {"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "log-norm", "inference_cfg_rate": 2.0}

REAL: dict[str, Any] = {
    "architecture": "voxcpm2",
    "lm_config": {
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "max_position_embeddings": 32768,
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 2,
        "kv_channels": 128,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000,
        "rope_scaling": {
            "type": "longrope",
            "long_factor": ROPE_RELEASED,
            "short_factor": ROPE_RELEASED,
            "original_max_position_embeddings": 32768,
        },
        "vocab_size": 73448,
        "use_mup": False,
        "scale_emb": 12,
        "dim_model_base": 256,
        "scale_depth": 1.4,
    },
    "patch_size": 4,
    "feat_dim": 64,
    "scalar_quantization_latent_dim": 512,
    "scalar_quantization_scale": 9,
    "residual_lm_num_layers": 8,
    "residual_lm_no_rope": True,
    "encoder_config": {
        "hidden_dim": 1024,
        "ffn_dim": 4096,
        "num_heads": 16,
        "num_layers": 12,
        "kv_channels": 128,
    },
    "dit_config": {
        "hidden_dim": 1024,
        "ffn_dim": 4096,
        "num_heads": 16,
        "num_layers": 12,
        "kv_channels": 128,
        "mean_mode": False,
        "cfm_config": CFM,
    },
    "audio_vae_config": {
        "encoder_dim": 128,
        "encoder_rates": [2, 5, 8, 8],
        "latent_dim": 64,
        "decoder_dim": 2048,
        "decoder_rates": [8, 6, 5, 2, 2, 2],
        "sr_bin_boundaries": [20000, 30000, 40000],
        "sample_rate": 16000,
        "out_sample_rate": 48000,
    },
    "max_length": 8192,
    "device": "cuda",
    "dtype": "bfloat16",
}
"""openbmb/VoxCPM2's config.json, the released values. The pipeline reads
``architecture`` to pick the model class; the model's config ignores it and
``dit_config.mean_mode`` (its own field is ``dit_mean_mode``, default off)."""


def tiny_config(vocab_size: int) -> dict[str, Any]:
    """The released fields at toy sizes. The long and short RoPE factors differ (the
    release's are equal), and max_position_embeddings equals the original length as
    released, so the short ones apply at scale 1."""
    config = copy.deepcopy(REAL)
    kv = 16
    config["lm_config"].update(
        hidden_size=64,
        intermediate_size=96,
        max_position_embeddings=256,
        num_attention_heads=4,
        num_hidden_layers=2,
        num_key_value_heads=2,
        kv_channels=kv,
        vocab_size=vocab_size,
        rope_scaling={
            "type": "longrope",
            "long_factor": [1.0 + 0.75 * i for i in range(kv // 2)],
            "short_factor": [0.9 + 0.4 * i for i in range(kv // 2)],
            "original_max_position_embeddings": 256,
        },
    )
    config.update(feat_dim=16, scalar_quantization_latent_dim=16, residual_lm_num_layers=2)
    small = {"hidden_dim": 32, "ffn_dim": 48, "num_heads": 4, "num_layers": 2, "kv_channels": kv}
    config["encoder_config"] = dict(small)
    config["dit_config"] = {**small, "mean_mode": False, "cfm_config": CFM}
    config["audio_vae_config"].update(encoder_dim=4, latent_dim=16, decoder_dim=64)
    config.update(max_length=256, device="cpu", dtype="float32")
    return config


def vocabulary() -> tuple[dict[str, int], list[tuple[str, str]]]:
    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for i in range(len(vocab), 101):
        vocab[f"<|reserved_{i}|>"] = i
    for token in AUDIO_TOKENS:
        vocab[token] = len(vocab)
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    for ch in "▁" + CHARS + CJK:
        vocab[ch] = len(vocab)
    for a, b in MERGES:
        vocab.setdefault(a + b, len(vocab))
    return vocab, MERGES


def write_tokenizer(out: Path) -> int:
    """tokenizer.json (Llama-style: "▁" prepended and for spaces, BPE with byte fallback,
    BOS template), tokenizer_config.json and special_tokens_map.json; the vocabulary size."""
    vocab, merges = vocabulary()
    model = models.BPE(
        vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True
    )
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIALS + AUDIO_TOKENS]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    tok.save(str(out / "tokenizer.json"))
    added = {
        str(vocab[t]): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIALS + AUDIO_TOKENS
    }
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        # transformers 5 rebuilds a Llama tokenizer's pipeline from vocab and merges (a
        # Metaspace pre-tokenizer; tokenizer.json's normalizer goes unused): "legacy"
        # decides whether text after an added token's spelling gets a "▁" too (true) or
        # only the text's start does. The release's value is not known here.
        "legacy": True,
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": None,
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    plain = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    special_map = {
        "bos_token": {"content": "<s>", **plain},
        "eos_token": {"content": "</s>", **plain},
        "unk_token": {"content": "<unk>", **plain},
    }
    (out / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")
    return tok.get_vocab_size()


class _Draw:
    """Random tensors in a fixed order from one seeded generator."""

    def __init__(self, seed: int, dtype: torch.dtype) -> None:
        self.g = torch.Generator().manual_seed(seed)
        self.dtype = dtype

    def normal(self, *shape: int, std: float = 1.0, mean: float = 0.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=self.g) * std + mean).to(self.dtype)

    def uniform(self, *shape: int, low: float, high: float) -> torch.Tensor:
        return (low + (high - low) * torch.rand(*shape, generator=self.g)).to(self.dtype)

    def linear(
        self, out: dict, name: str, n_out: int, n_in: int, bias: bool = True, gain: float = 0.6
    ) -> None:
        out[f"{name}.weight"] = self.normal(n_out, n_in, std=gain / n_in**0.5)
        if bias:
            out[f"{name}.bias"] = self.normal(n_out, std=0.02)

    def norm(self, out: dict, name: str, dim: int) -> None:
        out[f"{name}.weight"] = self.normal(dim, std=0.1, mean=1.0)


def _transformer(
    draw: _Draw, out: dict, prefix: str, lm: dict, hidden: int, ffn: int, heads: int, layers: int
) -> None:
    """A MiniCPM stack (``MiniCPMModel`` without embedding): ``kv_channels`` per head and
    the LM's ``num_key_value_heads``, as the reference's model_copy gives every stack."""
    kvc = lm["kv_channels"] or hidden // heads
    kv_heads = lm["num_key_value_heads"]
    for i in range(layers):
        p = f"{prefix}.layers.{i}"
        draw.linear(out, f"{p}.self_attn.q_proj", heads * kvc, hidden, bias=False)
        draw.linear(out, f"{p}.self_attn.k_proj", kv_heads * kvc, hidden, bias=False)
        draw.linear(out, f"{p}.self_attn.v_proj", kv_heads * kvc, hidden, bias=False)
        draw.linear(out, f"{p}.self_attn.o_proj", hidden, heads * kvc, bias=False)
        draw.linear(out, f"{p}.mlp.gate_proj", ffn, hidden, bias=False)
        draw.linear(out, f"{p}.mlp.up_proj", ffn, hidden, bias=False)
        draw.linear(out, f"{p}.mlp.down_proj", hidden, ffn, bias=False)
        draw.norm(out, f"{p}.input_layernorm", hidden)
        draw.norm(out, f"{p}.post_attention_layernorm", hidden)
    draw.norm(out, f"{prefix}.norm", hidden)


def model_tensors(config: dict[str, Any], seed: int = 0) -> dict[str, torch.Tensor]:
    """Every key of model.safetensors for ``config``, random, in the config's dtype."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[config["dtype"]]
    draw = _Draw(seed, dtype)
    lm, enc, dit = config["lm_config"], config["encoder_config"], config["dit_config"]
    h, f, q = lm["hidden_size"], config["feat_dim"], config["scalar_quantization_latent_dim"]
    e, d = enc["hidden_dim"], dit["hidden_dim"]
    out: dict[str, torch.Tensor] = {}
    out["base_lm.embed_tokens.weight"] = draw.normal(lm["vocab_size"], h)
    ffn, heads = lm["intermediate_size"], lm["num_attention_heads"]
    _transformer(draw, out, "base_lm", lm, h, ffn, heads, lm["num_hidden_layers"])
    _transformer(draw, out, "residual_lm", lm, h, ffn, heads, config["residual_lm_num_layers"])
    out["feat_encoder.special_token"] = draw.normal(1, 1, 1, e)
    draw.linear(out, "feat_encoder.in_proj", e, f)
    stack = {**lm, "kv_channels": enc["kv_channels"]}
    shape = (e, enc["ffn_dim"], enc["num_heads"], enc["num_layers"])
    _transformer(draw, out, "feat_encoder.encoder", stack, *shape)
    est = "feat_decoder.estimator"
    draw.linear(out, f"{est}.in_proj", d, f)
    draw.linear(out, f"{est}.cond_proj", d, f)
    draw.linear(out, f"{est}.out_proj", f, d)
    for mlp in ("time_mlp", "delta_time_mlp"):
        draw.linear(out, f"{est}.{mlp}.linear_1", d, d)
        draw.linear(out, f"{est}.{mlp}.linear_2", d, d)
    stack = {**lm, "kv_channels": dit["kv_channels"]}
    shape = (d, dit["ffn_dim"], dit["num_heads"], dit["num_layers"])
    _transformer(draw, out, f"{est}.decoder", stack, *shape)
    draw.linear(out, "fsq_layer.in_proj", q, h)
    draw.linear(out, "fsq_layer.out_proj", h, q)
    draw.linear(out, "enc_to_lm_proj", h, e)
    draw.linear(out, "lm_to_dit_proj", d, h)
    draw.linear(out, "res_to_dit_proj", d, h)
    draw.linear(out, "fusion_concat_proj", h, 2 * h)
    draw.linear(out, "stop_proj", h, h, gain=STOP_GAIN)
    draw.linear(out, "stop_head", 2, h, bias=False, gain=STOP_GAIN)
    return {name: t.contiguous() for name, t in out.items()}


def _wn_conv(
    draw: _Draw,
    out: dict,
    name: str,
    shape: tuple[int, int, int],
    g_dim: int,
    bias: int,
    gain: tuple[float, float] = (0.6, 1.1),
) -> None:
    """A weight-normed conv (old-style hook): bias, weight_g (dim 0 of the weight, which
    is out channels for Conv1d and in channels for ConvTranspose1d; each filter's norm,
    drawn from ``gain``), weight_v."""
    out[f"{name}.bias"] = draw.normal(bias, std=0.02)
    out[f"{name}.weight_g"] = draw.uniform(g_dim, 1, 1, low=gain[0], high=gain[1])
    out[f"{name}.weight_v"] = draw.normal(*shape)


def _snake(draw: _Draw, out: dict, name: str, dim: int) -> None:
    out[f"{name}.alpha"] = draw.uniform(1, dim, 1, low=0.5, high=1.5)


def _residual_unit(draw: _Draw, out: dict, name: str, dim: int) -> None:
    """Snake, depthwise k7 conv, Snake, 1x1 conv (the released VAE is depthwise); the
    branch is kept small next to its skip, so 18 units in a row do not blow up."""
    _snake(draw, out, f"{name}.block.0", dim)
    _wn_conv(draw, out, f"{name}.block.1", (dim, 1, 7), dim, dim)
    _snake(draw, out, f"{name}.block.2", dim)
    _wn_conv(draw, out, f"{name}.block.3", (dim, dim, 1), dim, dim, gain=VAE_BRANCH)


def vae_tensors(config: dict[str, Any], seed: int = 0) -> dict[str, torch.Tensor]:
    """audiovae.pth's state dict for ``config`` (fp32), in the reference's key order."""
    vae = config["audio_vae_config"]
    draw = _Draw(seed + 7919, torch.float32)
    latent, boundaries = vae["latent_dim"], vae["sr_bin_boundaries"]
    out: dict[str, torch.Tensor] = {}
    width = vae["encoder_dim"] * 2 ** len(vae["encoder_rates"])
    # The encoder registers fc_mu and fc_logvar before its block list.
    _wn_conv(draw, out, "encoder.fc_mu", (latent, width, 3), latent, latent, gain=VAE_MU)
    _wn_conv(draw, out, "encoder.fc_logvar", (latent, width, 3), latent, latent)
    dim = vae["encoder_dim"]
    _wn_conv(draw, out, "encoder.block.0", (dim, 1, 7), dim, dim)
    for i, stride in enumerate(vae["encoder_rates"], start=1):
        p = f"encoder.block.{i}.block"
        for unit in range(3):
            _residual_unit(draw, out, f"{p}.{unit}", dim)
        _snake(draw, out, f"{p}.3", dim)
        _wn_conv(draw, out, f"{p}.4", (2 * dim, dim, 2 * stride), 2 * dim, 2 * dim)
        dim *= 2
    out["decoder.sr_bin_boundaries"] = torch.tensor(boundaries, dtype=torch.int32)
    channels = vae["decoder_dim"]
    _wn_conv(draw, out, "decoder.model.0", (latent, 1, 7), latent, latent)
    _wn_conv(draw, out, "decoder.model.1", (channels, latent, 1), channels, channels)
    rates = vae["decoder_rates"]
    for i, stride in enumerate(rates):
        d_in, d_out = channels // 2**i, channels // 2 ** (i + 1)
        p = f"decoder.model.{2 + i}.block"
        _snake(draw, out, f"{p}.0", d_in)
        _wn_conv(draw, out, f"{p}.1", (d_in, d_out, 2 * stride), d_in, d_out)
        for unit in range(3):
            _residual_unit(draw, out, f"{p}.{2 + unit}", d_out)
    last = channels // 2 ** len(rates)
    _snake(draw, out, f"decoder.model.{2 + len(rates)}", last)
    _wn_conv(draw, out, f"decoder.model.{3 + len(rates)}", (1, last, 7), 1, 1, gain=VAE_OUT)
    buckets = len(boundaries) + 1
    for i in range(len(rates)):
        p = f"decoder.sr_cond_model.{2 + i}"
        out[f"{p}.scale_embed.weight"] = draw.normal(buckets, channels // 2**i, std=0.1, mean=1.0)
        out[f"{p}.bias_embed.weight"] = draw.normal(buckets, channels // 2**i, std=0.1)
    return out


def build(out: Path, seed: int = 0, real: bool = False) -> Path:
    """A checkpoint directory at ``out``; ``real``: the released shapes and config."""
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = write_tokenizer(out)
    config = REAL if real else tiny_config(vocab_size)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(model_tensors(config, seed), str(out / "model.safetensors"))
    torch.save({"state_dict": vae_tensors(config, seed)}, out / "audiovae.pth")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real", action="store_true", help="the released shapes (GPU)")
    args = parser.parse_args()
    print(build(args.out, args.seed, args.real))


if __name__ == "__main__":
    main()
