"""What a Fish Speech S2 Pro model costs on a GPU, per stream, from its checkpoint's
headers and options: the input of ``models.sizing.plan``.

Exact: the dual AR's weights at the model's dtype and the codec's in float32; the slow
transformer's KV per position (layers x KV heads x head dim x keys and values).
Measured on an H200: the codec decoder's activations per frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from models.sizing import GIB, MIB, MemoryProfile, Sizes

CPU = Sizes(max_contexts=4, max_ar_batch=4, max_vocoder_batch=4)
"""On a CPU: a real-size step is seconds; the tiny test models run a few at once."""
KV_POSITIONS_PER_STREAM = 1024
"""Positions budgeted per stream in the paged pool: the system message and a few turns
of speech (~21.5 frames a second); longer contexts take blocks short ones left."""
MAX_STREAMS = 256
STREAM_BYTES = 2 * MIB
"""Per slot: sampling tables, the last frame's embedding, graph rows."""
FRAME_BYTES = 6 * MIB
"""The codec decoder's activations per decoded frame (float32): 3.8-5.6 MiB measured
at peak on an H200 (bench/baselines/fish-dac-speed-real-h200.json), rounded up."""
VOCODER_BATCH_CAP = 64
RESERVE_BYTES = 3 * GIB


def memory_profile(checkpoint: Path, options: Mapping[str, Any]) -> MemoryProfile:
    """The profile of the checkpoint at ``checkpoint`` served with model ``options``."""
    from models.base import parse_options
    from models.blocks.dac_file import CODEC_FILE
    from models.checkpoint import read_headers, safetensors_files
    from models.dtypes import DTYPES
    from models.fish_speech.config import load_config
    from models.fish_speech.loader import FishOptions

    opts = parse_options(FishOptions, options, "model")
    itemsize = DTYPES[opts.dtype].itemsize
    cfg = load_config(checkpoint)
    numel = sum(info.numel for info in read_headers(safetensors_files(checkpoint)).values())
    codec_bytes = (checkpoint / CODEC_FILE).stat().st_size
    s = cfg.slow
    return MemoryProfile(
        family="fish_speech",
        dtype=opts.dtype,
        weights_bytes=numel * itemsize + codec_bytes,
        kv_bytes_per_position=2 * s.num_layers * s.num_kv_heads * s.head_dim * itemsize,
        kv_positions_per_stream=min(KV_POSITIONS_PER_STREAM, opts.kv_capacity),
        kv_memory_fraction=opts.kv_memory_fraction,
        kv_capacity=opts.kv_capacity,
        stream_bytes=STREAM_BYTES,
        vocoder_frame_bytes=FRAME_BYTES,
        vocoder_batch_cap=VOCODER_BATCH_CAP,
        max_streams=MAX_STREAMS,
        reserve_bytes=RESERVE_BYTES,
        notes=(
            f"slow AR: {s.num_layers} layers, {s.num_kv_heads} KV heads of {s.head_dim}",
            f"codec ~{FRAME_BYTES / MIB:.0f} MiB a decoded frame",
        ),
    )
