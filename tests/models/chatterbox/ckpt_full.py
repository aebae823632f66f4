"""A whole Chatterbox Turbo checkpoint directory for serving tests: a tiny T3 and
tokenizer, real-size random S3Gen flow and HiFT, and a built-in voice."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file

from tests.models.chatterbox.ckpt import T3Sizes, build_conds, build_t3, build_tokenizer
from tests.models.chatterbox.ckpt_flow import flow_tensors
from tests.models.chatterbox.ckpt_hift import mel2wav_tensors


def build_checkpoint(out: Path, seed: int = 0) -> Path:
    size = build_tokenizer(out)
    build_t3(out, T3Sizes(text_vocab=size), seed=seed)
    tensors = flow_tensors(seed + 1) | mel2wav_tensors(seed + 2)
    save_file(tensors, str(out / "s3gen_meanflow.safetensors"))
    build_conds(out, prompt=24, seed=seed + 3)
    return out
