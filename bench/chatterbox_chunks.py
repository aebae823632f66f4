"""How far chunked S3Gen flow decoding lands from decoding the whole clause.

S3Gen's flow attends over every token of a call, so a chunk decoded before the
clause is complete sees fewer future tokens than the whole-clause decode does.
For each policy (tokens in the first chunk, look-ahead tokens; later chunks
double up to ``--max-chunk``) this decodes a clause chunk by chunk, each chunk
from the clause's tokens so far plus the look-ahead, with the starting noise of
every frame fixed by its position (so re-runs agree where nothing changed), and
reports the SNR of the chunked mel and of its audio (the same HiFT pass over
each) against the whole clause's:

    python -m bench.chatterbox_chunks --model DIR --tokens 75 --out bench/results/chunks.json

Random weights measure the decoder's sensitivity, not speech quality: the
figures are for comparing policies with each other.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from models.blocks.flow import Flow
from models.blocks.hift import draw_source_noise, load_hift
from models.chatterbox.voices import load_builtin


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = float(np.sum((reference - other) ** 2))
    signal = float(np.sum(reference**2))
    return float("inf") if noise == 0 else 10 * np.log10(signal / noise)


def chunks(total: int, first: int, largest: int) -> list[tuple[int, int]]:
    out, start, size = [], 0, first
    while start < total:
        out.append((start, min(total, start + size)))
        start, size = start + size, min(size * 2, largest)
    return out


def measure(
    flow: Flow,
    hift: torch.nn.Module,
    voice: Any,
    tokens: torch.Tensor,
    noise: torch.Tensor,
    policies: list[tuple[int, int]],
    largest: int,
) -> list[dict[str, Any]]:
    prompt = voice.prompt_tokens.shape[1]
    n = tokens.shape[1]

    def mel_of(count: int) -> torch.Tensor:
        return flow.inference(
            tokens[:, :count],
            voice.prompt_tokens,
            voice.prompt_mel,
            voice.embedding,
            noise[:, :, : 2 * (prompt + count)],
        )

    whole = mel_of(n)
    rand = draw_source_noise(whole.shape[-1], generator=torch.Generator().manual_seed(0))
    whole_audio = hift(whole, rand)[0].numpy()
    rows = []
    for first, lookahead in policies:
        parts = []
        for a, b in chunks(n, first, largest):
            mel = mel_of(min(n, b + lookahead))
            parts.append(mel[:, :, 2 * a : 2 * b])
        chunked = torch.cat(parts, dim=-1)
        audio = hift(chunked, rand)[0].numpy()
        first_frames = slice(0, 2 * first)
        rows.append(
            {
                "first_chunk_tokens": first,
                "lookahead_tokens": lookahead,
                "mel_snr_db": snr_db(whole.numpy(), chunked.numpy()),
                "first_chunk_mel_snr_db": snr_db(
                    whole[..., first_frames].numpy(), chunked[..., first_frames].numpy()
                ),
                "audio_snr_db": snr_db(whole_audio, audio),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="checkpoint directory")
    parser.add_argument("--tokens", type=int, default=75, help="clause length (25 a second)")
    parser.add_argument("--first", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--lookahead", type=int, nargs="+", default=[3, 6, 12])
    parser.add_argument("--max-chunk", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    state = load_file(str(args.model / "s3gen_meanflow.safetensors"))
    flow = Flow()
    flow.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("flow.")})
    hift = load_hift(state)
    voice = load_builtin(args.model)
    if voice is None or voice.decoder is None:
        raise SystemExit(f"{args.model}: no built-in voice (conds.pt)")
    gen = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, 6561, (1, args.tokens), generator=gen)
    prompt = voice.decoder.prompt_tokens.shape[1]
    noise = torch.randn(1, 80, 2 * (prompt + args.tokens), generator=gen)
    policies = [(f, la) for f in args.first for la in args.lookahead]
    with torch.inference_mode():
        rows = measure(flow.eval(), hift, voice.decoder, tokens, noise, policies, args.max_chunk)
    for row in rows:
        print(
            f"first {row['first_chunk_tokens']:3d}  look-ahead {row['lookahead_tokens']:3d}  "
            f"mel {row['mel_snr_db']:6.1f} dB  first chunk {row['first_chunk_mel_snr_db']:6.1f} dB  "
            f"audio {row['audio_snr_db']:6.1f} dB",
            flush=True,
        )
    report = {"model": str(args.model), "tokens": args.tokens, "max_chunk": args.max_chunk,
              "levels": rows}  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
