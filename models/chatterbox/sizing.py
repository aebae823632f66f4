"""What a Chatterbox Turbo model costs on a GPU, per stream, from its checkpoint's
headers and options: the input of ``models.sizing.plan``.

Exact: the weights (T3, flow and HiFT at the model's dtype; the cloning encoders stay
float32) and T3's KV per position (GPT-2: layers x width x keys and values); every
slot reserves ``kv_capacity`` positions (T3's pool covers each slot's capacity).
Estimated, for the GPU run to check: S3Gen's activations per speech token.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from models.checkpoint import CheckpointError, read_header
from models.sizing import GIB, MIB, MemoryProfile, Sizes

CPU = Sizes(max_contexts=8, max_ar_batch=8, max_vocoder_batch=4)
"""On a CPU: S3Gen decodes a whole clause per row, so a few rows a call."""
MAX_STREAMS = 128
"""On an H200, 64 streams ran at RTF 0.90 (70.8x real time, bench/results/h200-chatterbox):
twice that leaves admission control room without graphs for slots nobody can use."""
STREAM_BYTES = 4 * MIB
"""Per slot besides KV: sampling tables, T3's graph rows, a clause's tokens and noise."""
CLAUSE_TOKENS = 250
"""Speech tokens of a long clause (10 s): S3Gen decodes a clause whole."""
TOKEN_BYTES = 1 * MIB
"""S3Gen's activations per speech token of a call (flow over two mel frames, HiFT's
960 samples in up to 64 channels, float32 around the iSTFT; estimated)."""
VOCODER_BATCH_CAP = 64
RESERVE_BYTES = 2 * GIB
FLOAT32_PREFIXES = ("tokenizer.", "speaker_encoder.")
"""S3Gen tensors the loader keeps float32 whatever the dtype (the cloning encoders)."""


def memory_profile(checkpoint: Path, options: Mapping[str, Any]) -> MemoryProfile:
    """The profile of the checkpoint at ``checkpoint`` served with model ``options``."""
    from models.base import parse_options
    from models.chatterbox.checkpoint import T3_FILE
    from models.chatterbox.loader import S3GEN_FILE, ChatterboxOptions
    from models.chatterbox.t3 import UNUSED_KEYS
    from models.chatterbox.voice_encoder import VE_FILE
    from models.dtypes import DTYPES

    opts = parse_options(ChatterboxOptions, options, "model")
    itemsize = DTYPES[opts.dtype].itemsize
    t3 = read_header(checkpoint / T3_FILE)
    s3gen = read_header(checkpoint / S3GEN_FILE)
    ve = read_header(checkpoint / VE_FILE) if (checkpoint / VE_FILE).is_file() else {}
    try:
        hidden = t3["tfmr.wpe.weight"].shape[1]
    except KeyError:
        raise CheckpointError("missing tensor 'tfmr.wpe.weight'", checkpoint / T3_FILE) from None
    layers = 1 + max(int(k.split(".")[2]) for k in t3 if k.startswith("tfmr.h."))
    float32 = sum(v.numel for k, v in s3gen.items() if k.startswith(FLOAT32_PREFIXES))
    float32 += sum(v.numel for v in ve.values())
    at_dtype = sum(v.numel for k, v in t3.items() if k not in UNUSED_KEYS)
    at_dtype += sum(v.numel for k, v in s3gen.items() if not k.startswith(FLOAT32_PREFIXES))
    return MemoryProfile(
        family="chatterbox",
        dtype=opts.dtype,
        weights_bytes=at_dtype * itemsize + float32 * 4,
        kv_bytes_per_position=2 * layers * hidden * itemsize,
        kv_positions_per_stream=opts.kv_capacity,
        kv_memory_fraction=None,
        kv_capacity=opts.kv_capacity,
        stream_bytes=STREAM_BYTES,
        vocoder_frame_bytes=TOKEN_BYTES,
        vocoder_frames_per_row=CLAUSE_TOKENS,
        vocoder_batch_cap=VOCODER_BATCH_CAP,
        max_streams=MAX_STREAMS,
        reserve_bytes=RESERVE_BYTES,
        notes=(
            f"T3: {layers} layers of width {hidden}; each slot reserves {opts.kv_capacity} "
            "positions",
            f"S3Gen ~{TOKEN_BYTES / MIB:.0f} MiB a speech token, {CLAUSE_TOKENS}-token "
            "clauses (estimated)",
        ),
    )
