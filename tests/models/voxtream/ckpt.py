"""Tiny random VoXtream2 checkpoints in the exact on-disk form the reference reads.

A directory as published (``herimor/voxtream2``): ``config.json`` (the reference's
``ModelConfig`` fields), ``phoneme_to_token.json`` and ``model.safetensors`` in the
reference's (torchtune's) names; beside them what the reference fetches from other
repositories: Kyutai's Mimi file (``tests.models.voxtream.ckpt_mimi``) and a voice
prompt in the reference's prompt-cache form (``voices/<name>.prompt.npy``).

The transformers are tiny and named ``tiny_*``; their shapes ride in ``config.json``
under ``formers`` (the reference ignores the key; its test runner registers the same
shapes in its transformer pool). The vocabularies, codebooks, phone states and token ids
are the real ones. ``audio_window_size`` is small, so a test reaches the sink rebuild.

    python -m tests.models.voxtream.ckpt OUT_DIR [--real]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from models.blocks.mimi import MimiConfig
from models.voxtream.config import KNOWN_FORMERS
from tests.models.voxtream.ckpt_mimi import TINY, build_mimi

PHONES = [
    "a",
    "ɪ",
    "ɛ",
    "æ",
    "ə",
    "ɚ",
    "ʌ",
    "ʊ",
    "u",
    "i",
    "o",
    "e",
    "ɔ",
    "ɑ",
    "ɜ",
    "ɐ",
    "ᵻ",
    "aɪ",
    "aʊ",
    "eɪ",
    "oʊ",
    "ɔɪ",
    "iː",
    "uː",
    "ɑː",
    "ɔː",
    "ɜː",
    "ɪə",
    "ʊə",
    "eə",
    "aɪə",
    "ˈa",
    "ˈɪ",
    "ˈɛ",
    "ˈæ",
    "ˈə",
    "ˈʌ",
    "ˈʊ",
    "ˈu",
    "ˈi",
    "ˈo",
    "ˈe",
    "ˈɔ",
    "ˈɑ",
    "ˈɜ",
    "ˈaɪ",
    "ˈaʊ",
    "ˈeɪ",
    "ˈoʊ",
    "ˈɔɪ",
    "ˈiː",
    "ˈuː",
    "ˈɑː",
    "ˈɔː",
    "ˈɜː",
    "ˈɪə",
    "ˌa",
    "ˌɪ",
    "ˌɛ",
    "ˌæ",
    "ˌə",
    "ˌʌ",
    "ˌʊ",
    "ˌu",
    "ˌi",
    "ˌo",
    "ˌe",
    "ˌaɪ",
    "ˌeɪ",
    "ˌoʊ",
    "ˌiː",
    "ˌuː",
    "ˌɑː",
    "p",
    "b",
    "t",
    "d",
    "k",
    "ɡ",
    "f",
    "v",
    "θ",
    "ð",
    "s",
    "z",
    "ʃ",
    "ʒ",
    "h",
    "m",
    "n",
    "ŋ",
    "l",
    "ɹ",
    "w",
    "j",
    "tʃ",
    "dʒ",
    "ɾ",
    "ʔ",
    "əl",
    "ɑːɹ",
    "ɔːɹ",
    "ɛɹ",
    "ɪɹ",
    "ʊɹ",
    "iə",
    "ɬ",
    "x",
    "ç",
    "n̩",
]
PUNCTUATION = {".": 117, ",": 118, "?": 119, "!": 121}
UNK = 122
FORMERS = {
    "tiny_phone": dict(
        num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=128
    ),
    "tiny_temp": dict(
        num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=160
    ),
    "tiny_dep": dict(num_layers=2, num_heads=4, num_kv_heads=1, embed_dim=64, intermediate_dim=96),
}
CONFIG = {
    "phone_former": "tiny_phone",
    "temp_former": "tiny_temp",
    "dep_former": "tiny_dep",
    "phone_vocab_size": 125,
    "audio_vocab_size": 2050,
    "audio_pad_size": 0,
    "embedding_dim": 64,
    "spk_embedding_dim": 192,
    "num_codebooks": 16,
    "num_phone_states": 6,
    "amortization_divisor": 16,
    "max_look_ahead": 5,
    "audio_window_size": 40,
    "phone_window_size": 625,
    "formers": FORMERS,
}
PROMPT_FRAMES = 6
REAL = {
    **{k: v for k, v in CONFIG.items() if k != "formers"},
    "phone_former": "phone_former",
    "temp_former": "temp_former",
    "dep_former": "dep_former_csm",
    "embedding_dim": 1024,
    "audio_window_size": 625,
}
"""herimor/voxtream2's config.json: the reference's own transformer shapes (~462 M
parameters), for GPU benchmarks with random weights."""


def phone_table() -> dict[str, int]:
    table = {phone: i for i, phone in enumerate(PHONES[:117])}
    table.update(PUNCTUATION)
    table["unk"] = UNK
    return table


def _layers(prefix: str, spec: dict[str, int], g: torch.Generator) -> dict[str, torch.Tensor]:
    d, heads, kv, mlp = (
        spec[k] for k in ("embed_dim", "num_heads", "num_kv_heads", "intermediate_dim")
    )
    hd = d // heads
    out: dict[str, torch.Tensor] = {}

    def w(*shape: int, fan: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) / fan**0.5

    for i in range(spec["num_layers"]):
        p = f"{prefix}.layers.{i}."
        out[p + "attn.q_proj.weight"] = w(heads * hd, d, fan=d)
        out[p + "attn.k_proj.weight"] = w(kv * hd, d, fan=d)
        out[p + "attn.v_proj.weight"] = w(kv * hd, d, fan=d)
        out[p + "attn.output_proj.weight"] = w(d, heads * hd, fan=heads * hd)
        out[p + "mlp.w1.weight"] = w(mlp, d, fan=d)
        out[p + "mlp.w3.weight"] = w(mlp, d, fan=d)
        out[p + "mlp.w2.weight"] = w(d, mlp, fan=mlp)
        out[p + "sa_norm.scale"] = 1 + 0.1 * torch.randn(d, generator=g)
        out[p + "mlp_norm.scale"] = 1 + 0.1 * torch.randn(d, generator=g)
    out[prefix + ".norm.scale"] = 1 + 0.1 * torch.randn(d, generator=g)
    return out


def model_tensors(seed: int = 0, real: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    c = REAL if real else CONFIG
    d, v, k = c["embedding_dim"], c["audio_vocab_size"], c["num_codebooks"]
    out = {
        "phone_embeddings.weight": torch.randn(c["phone_vocab_size"], d, generator=g),
        "audio_embeddings.weight": torch.randn(v * k, d, generator=g) * 0.3,
        "spk_emb_proj.weight": torch.randn(d, c["spk_embedding_dim"], generator=g) / 14,
        # Larger head scales spread the scores: greedy picks are far from ties.
        "sem_head.weight": torch.randn(v * c["num_phone_states"], d, generator=g) * 0.5,
        "audio_head": torch.randn(k - 1, d, v, generator=g) * 0.5,
    }
    for prefix, key in (
        ("phone_former", "phone_former"),
        ("temp_former", "temp_former"),
        ("dep_former", "dep_former"),
    ):
        out.update(_layers(prefix, _shape(c[key]), g))
    return {name: t.float().contiguous() for name, t in out.items()}


def _shape(name: str) -> dict[str, int]:
    if name in FORMERS:
        return FORMERS[name]
    layers, heads, kv, dim, mlp = KNOWN_FORMERS[name]
    return dict(
        num_layers=layers, num_heads=heads, num_kv_heads=kv, embed_dim=dim, intermediate_dim=mlp
    )


def write_prompt(path: Path, seed: int, frames: int = PROMPT_FRAMES) -> None:
    """A voice in the reference's prompt-cache form (``np.save`` of a dict)."""
    rng = np.random.default_rng(seed)
    speaker = rng.standard_normal((1, 192)).astype(np.float32)
    speaker /= np.linalg.norm(speaker)
    data = {
        "audio_tokens": rng.integers(0, 2048, (1, 16, frames)).astype(np.int64),
        "spk_embedding": speaker.astype(np.float16),
    }
    np.save(path, data, allow_pickle=True)


def build(out: Path, seed: int = 0, real: bool = False) -> Path:
    """A checkpoint directory at ``out``; ``real``: the published sizes (the transformers'
    and Mimi's), voices of 3 s prompts."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(REAL if real else CONFIG, indent=1))
    (out / "phoneme_to_token.json").write_text(json.dumps(phone_table(), ensure_ascii=False))
    save_file(model_tensors(seed, real), str(out / "model.safetensors"))
    build_mimi(out, MimiConfig() if real else TINY, seed=seed)
    (out / "voices").mkdir(exist_ok=True)
    frames = 38 if real else PROMPT_FRAMES
    write_prompt(out / "voices" / "default.prompt.npy", seed + 1, frames)
    write_prompt(out / "voices" / "second.prompt.npy", seed + 2, frames=4 if not real else 25)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real", action="store_true", help="the published sizes")
    args = parser.parse_args()
    print(build(args.out, args.seed, args.real))


if __name__ == "__main__":
    main()
