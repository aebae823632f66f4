"""A whole Chatterbox Turbo checkpoint directory for serving tests: a tiny T3 and
tokenizer, real-size random S3Gen (flow, HiFT, S3 tokenizer, CAM++), the voice
encoder, and a built-in voice.

``--real`` makes T3 GPT-2 medium sized (24 layers, width 1024, 8,196 positions)
and the built-in voice's prompts as long as the reference's (375 T3 tokens, a
10 s decoder prompt), for benchmarks on a GPU:

    python -m tests.models.chatterbox.ckpt_full /tmp/cbx --real
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from safetensors.torch import save_file

from tests.models.chatterbox.ckpt import T3Sizes, build_conds, build_t3, build_tokenizer
from tests.models.chatterbox.ckpt_campplus import add_campplus_tensors
from tests.models.chatterbox.ckpt_flow import flow_tensors
from tests.models.chatterbox.ckpt_hift import mel2wav_tensors
from tests.models.chatterbox.ckpt_s3tok import add_tokenizer_tensors
from tests.models.chatterbox.ckpt_ve import build_ve

REAL_T3 = T3Sizes(hidden=1024, layers=24, positions=8196)


def build_checkpoint(out: Path, seed: int = 0, real: bool = False) -> Path:
    size = build_tokenizer(out)
    sizes = REAL_T3 if real else T3Sizes()
    build_t3(out, replace(sizes, text_vocab=size), seed=seed)
    tensors = flow_tensors(seed + 1) | mel2wav_tensors(seed + 2)
    add_tokenizer_tensors(tensors, seed + 4)
    add_campplus_tensors(tensors, seed + 5)
    save_file(tensors, str(out / "s3gen_meanflow.safetensors"))
    build_ve(out, seed + 6)
    build_conds(out, prompt=375 if real else 24, seed=seed + 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--real", action="store_true", help="GPT-2 medium sized T3")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(build_checkpoint(args.out, args.seed, args.real))


if __name__ == "__main__":
    main()
