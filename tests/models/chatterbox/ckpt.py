"""Random Chatterbox Turbo checkpoints in the on-disk format of ``ResembleAI/chatterbox-turbo``.

``t3_turbo_v1.safetensors`` holds T3 (a GPT-2 backbone ``tfmr.*``, the speaker
projection, text/speech embeddings and heads) under the names and layouts the
reference's ``T3.state_dict()`` has. The tests' tiny sizes keep 64-wide heads,
as GPT-2 medium has, so the head count follows from the width.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


@dataclass(frozen=True)
class T3Sizes:
    hidden: int = 128
    layers: int = 2
    positions: int = 1024
    text_vocab: int = 320
    speech_vocab: int = 6563
    speaker_dim: int = 256

    @property
    def heads(self) -> int:
        return self.hidden // 64

    def for_reference(self) -> dict[str, int]:
        return {
            "hidden": self.hidden,
            "layers": self.layers,
            "heads": self.heads,
            "positions": self.positions,
        }


def t3_tensors(sizes: T3Sizes, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    h = sizes.hidden

    def rand(*shape: int, scale: float = 0.02) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * scale

    def norm(prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}.weight": 1 + rand(h, scale=0.1), f"{prefix}.bias": rand(h)}

    out: dict[str, torch.Tensor] = {
        "tfmr.wte.weight": rand(sizes.text_vocab, h),
        "tfmr.wpe.weight": rand(sizes.positions, h, scale=0.1),
    }
    for i in range(sizes.layers):
        p = f"tfmr.h.{i}"
        out |= norm(f"{p}.ln_1") | norm(f"{p}.ln_2")
        out[f"{p}.attn.c_attn.weight"] = rand(h, 3 * h, scale=h**-0.5)
        out[f"{p}.attn.c_attn.bias"] = rand(3 * h)
        out[f"{p}.attn.c_proj.weight"] = rand(h, h, scale=h**-0.5)
        out[f"{p}.attn.c_proj.bias"] = rand(h)
        out[f"{p}.mlp.c_fc.weight"] = rand(h, 4 * h, scale=h**-0.5)
        out[f"{p}.mlp.c_fc.bias"] = rand(4 * h)
        out[f"{p}.mlp.c_proj.weight"] = rand(4 * h, h, scale=(4 * h) ** -0.5)
        out[f"{p}.mlp.c_proj.bias"] = rand(h)
    out |= norm("tfmr.ln_f")
    out["cond_enc.spkr_enc.weight"] = rand(h, sizes.speaker_dim, scale=sizes.speaker_dim**-0.5)
    out["cond_enc.spkr_enc.bias"] = rand(h)
    out["text_emb.weight"] = rand(sizes.text_vocab, h, scale=1.0)
    out["speech_emb.weight"] = rand(sizes.speech_vocab, h, scale=1.0)
    out["text_head.weight"] = rand(sizes.text_vocab, h)
    # A head wide enough that greedy decoding varies its tokens on random weights.
    out["speech_head.weight"] = rand(sizes.speech_vocab, h, scale=h**-0.5 * 4)
    out["speech_head.bias"] = rand(sizes.speech_vocab)
    return {k: v.contiguous() for k, v in out.items()}


def build_t3(out: Path, sizes: T3Sizes = T3Sizes(), seed: int = 0) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    save_file(t3_tensors(sizes, seed), str(out / "t3_turbo_v1.safetensors"))
    return out


TAGS = ("[laugh]", "[cough]", "[chuckle]", "[sigh]")
"""Paralinguistic tags the tiny tokenizer adds after its vocabulary, as Turbo's does."""

CORPUS = (
    "The quick brown fox jumps over the lazy dog. Hello there, how are you today? "
    "Numbers like 12345 and 3.14 are read aloud; quotes \"like this\" and 'this' too! "
    "Streaming speech from a language model, word by word, clause by clause."
)


def build_tokenizer(out: Path, vocab_size: int = 316) -> int:
    """A tiny GPT-2 style byte-level BPE (``vocab.json``, ``merges.txt``,
    ``tokenizer_config.json``, ``added_tokens.json``); returns its full size."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        special_tokens=["<|endoftext|>"],
    )
    tok.train_from_iterator([CORPUS] * 20, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.model.save(str(out))
    base = tok.get_vocab_size()
    added = {tag: base + i for i, tag in enumerate(TAGS)}
    (out / "added_tokens.json").write_text(json.dumps(added), encoding="utf-8")
    config = {
        "add_prefix_space": False,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "model_max_length": 1024,
        "tokenizer_class": "GPT2Tokenizer",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return base + len(TAGS)


def build_conds(out: Path, prompt: int = 40, seed: int = 0) -> Path:
    """A built-in voice (``conds.pt``) in the layout ``Conditionals.save`` writes."""
    gen = torch.Generator().manual_seed(seed)
    speaker = torch.nn.functional.normalize(torch.rand(1, 256, generator=gen), dim=1)
    decoder_prompt = 2 * prompt // 3
    t3 = {
        "speaker_emb": speaker,
        "clap_emb": None,
        "cond_prompt_speech_tokens": torch.randint(0, 6561, (1, prompt), generator=gen),
        "cond_prompt_speech_emb": None,
        "emotion_adv": 0.5 * torch.ones(1, 1, 1),
    }
    decoder = {
        "prompt_token": torch.randint(0, 6561, (1, decoder_prompt), generator=gen),
        "prompt_token_len": torch.tensor([decoder_prompt]),
        "prompt_feat": torch.randn(1, 2 * decoder_prompt, 80, generator=gen) - 6,
        "prompt_feat_len": None,
        "embedding": torch.randn(1, 192, generator=gen),
    }
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"t3": t3, "gen": decoder}, out / "conds.pt")
    return out


S3GEN_FILE = "s3gen_meanflow.safetensors"


def add_s3gen_tensors(
    target: dict[str, torch.Tensor] | Path, tensors: dict[str, torch.Tensor]
) -> None:
    """Add ``tensors`` to a state dict (in place) or to an S3Gen safetensors file (a
    checkpoint directory's, or the file itself; created when absent, others' tensors
    kept)."""
    if isinstance(target, dict):
        target.update(tensors)
        return
    path = target / S3GEN_FILE if target.is_dir() else target
    state = load_file(str(path)) if path.exists() else {}
    state.update(tensors)
    save_file(state, str(path))
