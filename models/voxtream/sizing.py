"""What a VoXtream2 model costs on a GPU, per stream, from its checkpoint's headers and
options: the input of ``models.sizing.plan``.

Exact: the network's weights at the model's dtype, Mimi's and the speaker encoder's in
float32 (their files' sizes); the temporal transformer's keys and values per position,
twice (a context's conditional and unconditional rows), over its window. Per stream
besides: the phone features (two rows of ``max_phone_tokens``), the inputs the window is
rebuilt from, and Mimi's streamed decoder state (its transformer's 250 steps of keys and
values over 8 layers, float32). Estimated, not yet measured on a GPU: Mimi's
activations per decoded frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from models.sizing import GIB, MIB, MemoryProfile, Sizes

CPU = Sizes(max_contexts=4, max_ar_batch=4, max_vocoder_batch=4)
"""On a CPU: a real-size frame step takes a good part of a second; the tiny test models
run a few at once."""
MAX_STREAMS = 256
MIMI_STATE_BYTES = 10 * MIB
"""A stream's Mimi decoder state: 8 layers x 250 steps x 512 x keys and values in float32
(8 MiB) and the convolutions' histories."""
FRAME_BYTES = 8 * MIB
"""Mimi's decoder activations per decoded frame (float32; an estimate)."""
VOCODER_BATCH_CAP = 128
RESERVE_BYTES = 3 * GIB


def memory_profile(checkpoint: Path, options: Mapping[str, Any]) -> MemoryProfile:
    """The profile of the checkpoint at ``checkpoint`` served with model ``options``."""
    from models.base import parse_options
    from models.blocks.mimi import MIMI_FILE
    from models.checkpoint import read_headers
    from models.dtypes import DTYPES
    from models.voxtream.checkpoint import WEIGHTS
    from models.voxtream.config import load_config
    from models.voxtream.loader import VoxOptions
    from models.voxtream.speaker import SPEAKER_FILE

    opts = parse_options(VoxOptions, options, "model")
    itemsize = DTYPES[opts.dtype].itemsize
    cfg = load_config(checkpoint)
    numel = sum(info.numel for info in read_headers([checkpoint / WEIGHTS]).values())
    extra = 0
    for name, option in ((MIMI_FILE, opts.mimi), (SPEAKER_FILE, opts.speaker_encoder)):
        path = Path(option) if option else checkpoint / name
        extra += path.stat().st_size if path.is_file() else 0
    t, dim = cfg.temporal, cfg.embedding_dim
    window = cfg.audio_window_size
    tables = 2 * (opts.max_phone_tokens + 2 + window) * dim * itemsize
    return MemoryProfile(
        family="voxtream",
        dtype=opts.dtype,
        weights_bytes=numel * itemsize + extra,
        kv_bytes_per_position=2 * 2 * t.num_layers * t.num_kv_heads * t.head_dim * itemsize,
        kv_positions_per_stream=window,
        kv_memory_fraction=opts.kv_memory_fraction,
        kv_capacity=window,
        stream_bytes=tables + 2 * MIMI_STATE_BYTES,
        vocoder_frame_bytes=FRAME_BYTES,
        vocoder_batch_cap=VOCODER_BATCH_CAP,
        max_streams=MAX_STREAMS,
        reserve_bytes=RESERVE_BYTES,
        notes=(
            f"temporal transformer: {t.num_layers} layers, {t.num_kv_heads} KV heads of "
            f"{t.head_dim}, two rows a stream over a {window}-frame window",
            "Mimi decoder state ~10 MiB a stream (two per slot: streams outlive slots)",
        ),
    )
