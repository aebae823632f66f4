"""Benchmark Fish Speech's own generation loop on an S2 Pro checkpoint, one stream.

fish-speech 0.1.0's ``DualARTransformer`` mapped to S2 Pro and S2 Pro's decoding loop
(``tools/ref/fish_speech/ref_dual_ar.py``: its model, caches and per-frame loop; greedy
here, ``<|im_end|>`` masked so every run makes ``--frames`` frames). The reference
generates one request at a time (its caches hold one sequence) and decodes the codes
to audio once the whole turn is made, so its first audio comes after the turn's last
frame and the codec's decode of all of them; c requests queue one after another.

    python3 -m bench.reference_fish --model DIR --frames 172 --concurrency 1 4 --out FILE.json

The codec's decode of a whole turn is timed with this server's codec (the same
modules, exact against the reference's: tests/models/fish_speech).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "ref" / "fish_speech"))

TEXT = "The quick brown fox jumps over the lazy dog, then rests in the warm afternoon sun."


def main() -> None:
    from ref_dual_ar import build  # the reference's model, mapped to S2 Pro
    from tokenizers import Tokenizer

    from models.blocks.dac_file import load_codec

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=172)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    model, data = build(args.model, "cuda", dtype)
    codec = load_codec(args.model, "cuda", torch.float32)
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    n = model.config.num_codebooks
    begin, end = data["semantic_start_token_id"], data["semantic_end_token_id"]
    parts = [
        "<|im_start|>system\n",
        "convert the provided text to speech",
        "<|im_end|>\n",
        "<|im_start|>user\n",
        TEXT,
        "<|im_end|>\n",
        "<|im_start|>assistant\n<|voice|>",
    ]
    ids = [i for p in parts for i in tok.encode(p, add_special_tokens=False).ids]
    prompt = torch.zeros((n + 1, len(ids)), dtype=torch.long, device="cuda")
    prompt[0] = torch.tensor(ids)
    mask = torch.full((model.config.vocab_size,), float("-inf"), device="cuda")
    mask[begin : end + 1] = 0

    @torch.no_grad()
    def one_turn() -> tuple[float, float, np.ndarray]:
        for layer in model.layers:
            layer.attention.kv_cache.k_cache.zero_()
            layer.attention.kv_cache.v_cache.zero_()
        x, pos = prompt[None], torch.arange(prompt.shape[1], device="cuda")
        frames = []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        first = 0.0
        for step in range(args.frames):
            out = model.forward_generate(x, pos)
            token = int((out.logits[0, -1].float() + mask).argmax())
            for layer in model.fast_layers:
                layer.attention.kv_cache.k_cache.zero_()
                layer.attention.kv_cache.v_cache.zero_()
            model.forward_generate_fast(out.hidden_states[:, -1:], torch.tensor([0], device="cuda"))
            h = model.fast_embeddings(torch.tensor([token - begin], device="cuda"))
            codes = [token - begin]
            for k in range(1, n):
                scores = model.forward_generate_fast(h, torch.tensor([k], device="cuda"))
                code = int(scores[0, -1, :1024].argmax())
                codes.append(code)
                h = model.fast_embeddings(torch.tensor([code], device="cuda"))
            frames.append(codes)
            if step == 0:
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
            x = torch.tensor([token, *codes], device="cuda")[None, :, None]
            pos = pos[-1:] + 1
        codes = torch.tensor(frames, device="cuda").T[None]
        with torch.no_grad():
            codec.decode(codes)
        torch.cuda.synchronize()
        return first, time.perf_counter() - t0, np.asarray(frames)

    one_turn()  # warm-up
    seconds = args.frames * codec.hop_length / codec.sample_rate
    levels = []
    for c in args.concurrency:
        ttfa, firsts, wholes = [], [], []
        start = time.perf_counter()
        for _ in range(c):
            first, whole, _ = one_turn()
            ttfa.append(time.perf_counter() - start)
            firsts.append(first)
            wholes.append(whole)
        total = time.perf_counter() - start
        levels.append(
            {
                "concurrency": c,
                "ttfa_ms_p50": 1000 * float(np.percentile(ttfa, 50)),
                "ttfa_ms_p95": 1000 * float(np.percentile(ttfa, 95)),
                "first_frame_ms_p50": 1000 * float(np.percentile(firsts, 50)),
                "rtf_p50": float(np.percentile([w / seconds for w in wholes], 50)),
                "x_real_time": c * seconds / total,
                "audio_s_per_stream": seconds,
            }
        )
        print(json.dumps(levels[-1]), flush=True)
    args.out.write_text(
        json.dumps({"reference": "fish-speech 0.1.0 DualAR + S2 loop", "levels": levels}, indent=2)
    )


if __name__ == "__main__":
    main()
