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
from safetensors.torch import save_file


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
