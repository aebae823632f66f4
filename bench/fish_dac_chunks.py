"""How far S2 Pro's codec decoded in chunks lands from decoding the whole sequence.

The decoder is causal, so a chunk needs only frames before it: the quantizer's
``post_module`` transformer (8 layers, each attending to 128 frames) reaches far
back, the convolutions after it about 10 frames. ``FishVocoder`` runs the
transformer over ``transformer_context`` frames before a chunk and the
convolutions over ``conv_context``. This decodes one random code sequence whole
and chunk by chunk through ``FishVocoder.decode`` (one stream, chunks as the
engine's vocoder loop cuts them: ``first`` frames, then doubling up to ``max``),
and reports for each policy the SNR of the chunked audio against the whole
(``snr_db``), the worst chunk's (``worst_chunk_snr_db``), and the frames each part
decodes per output frame (its cost over whole decoding). Experiments:

- ``conv``: the transformer sees the whole past; conv context and chunk size vary;
- ``transformer``: conv context 16 (past the convolutions' reach); transformer
  context varies, positions absolute (the vocoder's) or restarting at 0 in
  every window (vllm-omni's);
- ``schedule``: candidate policies under the engine's chunk schedules.

    python -m bench.fish_dac_chunks --size real --device cuda --out bench/results/fish-dac-chunks.json
    python -m bench.fish_dac_chunks --checkpoint S2_PRO_DIR ...   # the published weights

Without ``--checkpoint`` the weights are random (tests/models/fish_speech/ckpt_codec.py,
layer scales 0.1-0.4): they measure how the decoder's structure carries history,
not speech quality, and trained weights may look back more or less.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.base import DecodeItem
from models.blocks.dac import DAC, DACConfig, load_dac
from models.blocks.dac_file import load_codec
from models.fish_speech.vocoder import FishVocoder


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = float(np.sum((reference.astype(np.float64) - other) ** 2))
    signal = float(np.sum(reference.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * math.log10(signal / noise)


def schedule(total: int, first: int, largest: int) -> list[tuple[int, int]]:
    out, start, size = [], 0, first
    while start < total:
        out.append((start, min(total, start + size)))
        start, size = start + size, min(size * 2, largest)
    return out


def random_codes(cfg: DACConfig, frames: int, seed: int) -> np.ndarray:
    """int64 [frames, n_codebooks]: uniform codes, the semantic one first."""
    rng = np.random.default_rng(seed)
    semantic = rng.integers(0, cfg.semantic_codebook_size, (frames, 1))
    residual = rng.integers(0, cfg.codebook_size, (frames, cfg.residual_codebooks))
    return np.concatenate([semantic, residual], axis=1)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_policy(
    codec: DAC,
    codes: np.ndarray,
    whole: np.ndarray,
    *,
    transformer_context: int,
    conv_context: int,
    first: int,
    largest: int,
    absolute: bool = True,
) -> dict[str, Any]:
    vocoder = FishVocoder(
        codec,
        codec.device,
        codec.dtype,
        transformer_context=transformer_context,
        conv_context=conv_context,
        absolute_positions=absolute,
    )
    stream = vocoder.new_stream()
    hop = codec.hop_length
    pieces, worst, transformer_frames, conv_frames = [], math.inf, 0, 0
    sync(codec.device)
    began = time.perf_counter()
    for start, end in schedule(len(codes), first, largest):
        low = max(0, start - transformer_context)
        (audio,) = vocoder.decode([DecodeItem(stream, codes[low:end], start - low)])
        pieces.append(audio)
        worst = min(worst, snr_db(whole[start * hop : end * hop], audio))
        transformer_frames += end - low
        conv_frames += end - max(0, start - conv_context)
    sync(codec.device)
    seconds = time.perf_counter() - began
    chunked = np.concatenate(pieces)
    assert chunked.shape == whole.shape, (chunked.shape, whole.shape)
    return {
        "transformer_context": transformer_context,
        "conv_context": conv_context,
        "first": first,
        "max": largest,
        "positions": "absolute" if absolute else "restart",
        "snr_db": round(snr_db(whole, chunked), 2),
        "worst_chunk_snr_db": round(worst, 2),
        "transformer_frames_per_frame": round(transformer_frames / len(codes), 3),
        "conv_frames_per_frame": round(conv_frames / len(codes), 3),
        "seconds": round(seconds, 3),
    }


def experiments(codec: DAC, codes: np.ndarray, whole: np.ndarray) -> dict[str, list[dict]]:
    total = len(codes)

    def run(**kw: Any) -> dict[str, Any]:
        result = run_policy(codec, codes, whole, **kw)
        print(json.dumps(result), flush=True)
        return result

    out: dict[str, list[dict]] = {"conv": [], "transformer": [], "schedule": []}
    for size in (1, 4, 16):
        for conv in (0, 2, 4, 6, 8, 10, 12, 16):
            out["conv"].append(
                run(transformer_context=total, conv_context=conv, first=size, largest=size)
            )
    for absolute in (True, False):
        for context in (16, 32, 64, 96, 128, 160, 192, 256, 384):
            out["transformer"].append(
                run(
                    transformer_context=context,
                    conv_context=16,
                    first=2,
                    largest=32,
                    absolute=absolute,
                )
            )
    for context, conv in ((96, 8), (128, 8), (128, 12), (192, 12), (256, 12)):
        for first, largest in ((1, 32), (2, 32), (4, 32), (2, 16), (2, 64)):
            out["schedule"].append(
                run(transformer_context=context, conv_context=conv, first=first, largest=largest)
            )
    return out


def numerics(codec: DAC, codes: np.ndarray, whole: np.ndarray) -> dict[str, float]:
    """SNR of whole decoding in other arithmetic against float32's (on a GPU: TF32
    convolutions and matmuls, as torch allows them by default for convolutions;
    bfloat16 weights and activations)."""
    batch = torch.from_numpy(codes.T.copy())[None]
    out: dict[str, float] = {}
    if codec.device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        out["tf32_snr_db"] = round(snr_db(whole, codec.decode(batch)[0].float().cpu().numpy()), 2)
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        half = copy.deepcopy(codec).to(torch.bfloat16)
        out["bf16_snr_db"] = round(snr_db(whole, half.decode(batch)[0].float().cpu().numpy()), 2)
        del half
    return out


def speed(codec: DAC, batches: tuple[int, ...] = (1, 8, 32, 64), chunk: int = 16) -> list[dict]:
    """Steady-state decode calls on a GPU: ``batch`` streams each decoding ``chunk`` new
    frames after a full left context (default policy), float32 with TF32 off: wall
    time per call, seconds of audio per second, and peak memory per conv frame."""
    vocoder = FishVocoder(codec, codec.device, codec.dtype)
    context = vocoder.left_context
    codes = random_codes(codec.cfg, context + chunk, 7)
    out = []
    for batch in batches:
        streams = [vocoder.new_stream() for _ in range(batch)]
        for stream in streams:
            stream.position = 500
        items = [DecodeItem(s, codes, context) for s in streams]
        vocoder.decode(items)
        sync(codec.device)
        torch.cuda.reset_peak_memory_stats(codec.device)
        base = torch.cuda.memory_allocated(codec.device)
        began = time.perf_counter()
        runs = 5
        for _ in range(runs):
            vocoder.decode(items)
        sync(codec.device)
        call_s = (time.perf_counter() - began) / runs
        peak = torch.cuda.max_memory_allocated(codec.device) - base
        audio_s = batch * chunk * codec.hop_length / codec.sample_rate
        conv_frames = batch * (chunk + vocoder.conv_context)
        out.append(
            {
                "batch": batch,
                "chunk": chunk,
                "call_ms": round(1000 * call_s, 2),
                "audio_s_per_s": round(audio_s / call_s, 1),
                "peak_mib_per_conv_frame": round(peak / conv_frames / 2**20, 2),
            }
        )
        print(json.dumps(out[-1]), flush=True)
    return out


def speed_tf32(codec: DAC) -> list[dict]:
    """:func:`speed` with TF32 convolutions (torch's default for cuDNN) and matmuls."""
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return speed(codec)
    finally:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False


def build_codec(args: argparse.Namespace, device: torch.device) -> DAC:
    if args.checkpoint is not None:
        return load_codec(args.checkpoint, device, torch.float32)
    from tests.models.fish_speech.ckpt_codec import TINY, codec_tensors

    cfg = DACConfig() if args.size == "real" else TINY
    return load_dac(codec_tensors(cfg, args.seed)).to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint", type=Path, help="an S2 Pro directory (codec.pth)")
    parser.add_argument("--size", choices=("tiny", "real"), default="tiny")
    parser.add_argument("--frames", type=int, default=400, help="code frames (21.5 per s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--speed-only", action="store_true", help="skip the SNR experiments")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # fp32 convolutions and matmuls throughout: TF32 would set a noise floor of its own.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device(args.device)
    codec = build_codec(args, device)
    codes = random_codes(codec.cfg, args.frames, args.seed + 1)
    sync(device)
    began = time.perf_counter()
    whole = codec.decode(torch.from_numpy(codes.T.copy())[None])[0].float().cpu().numpy()
    sync(device)
    whole_s = time.perf_counter() - began
    report = {
        "weights": str(args.checkpoint) if args.checkpoint else f"random ({args.size})",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "frames": args.frames,
        "audio_s": round(args.frames * codec.hop_length / codec.sample_rate, 2),
        "whole_decode_s": round(whole_s, 3),
        "whole_rms": round(float(np.sqrt(np.mean(whole.astype(np.float64) ** 2))), 4),
        "numerics": numerics(codec, codes, whole),
        "speed": speed(codec) if device.type == "cuda" else [],
        "speed_tf32": speed_tf32(codec) if device.type == "cuda" else [],
        **({} if args.speed_only else experiments(codec, codes, whole)),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
