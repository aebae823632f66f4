"""What a VoxCPM2 model costs on a GPU, per stream, from its checkpoint's headers and
options: the input of ``models.sizing.plan``.

Exact: the network's weights at the model's dtype and the AudioVAE's in float32 (its
file's size); keys and values per position of both language models (the base model's
and the residual model's layers). Estimated, not yet measured on a GPU: the AudioVAE
decoder's activations per decoded patch (a chunk decodes with 6 patches of left context).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from models.sizing import GIB, MIB, MemoryProfile, Sizes

CPU = Sizes(max_contexts=4, max_ar_batch=4, max_vocoder_batch=4)
"""On a CPU: a real-size step (ten DiT passes) takes seconds; the tiny test models run a
few at once."""
KV_POSITIONS_PER_STREAM = 512
"""Positions budgeted per turn: a cloned voice's prompt (6.25 a second), the text, and
its patches (6.25 a second); longer turns take blocks shorter ones left."""
MAX_STREAMS = 256
STREAM_BYTES = 2 * MIB
"""Per slot: the two models' last states, the previous patch, graph rows."""
FRAME_BYTES = 24 * MIB
"""The AudioVAE decoder's activations per decoded patch with its left context (float32,
7,680 samples through 32-2,048 channels; an estimate)."""
VOCODER_BATCH_CAP = 64
RESERVE_BYTES = 4 * GIB


def memory_profile(checkpoint: Path, options: Mapping[str, Any]) -> MemoryProfile:
    """The profile of the checkpoint at ``checkpoint`` served with model ``options``."""
    from models.base import parse_options
    from models.blocks.audiovae import VAE_FILE
    from models.checkpoint import read_headers
    from models.dtypes import DTYPES
    from models.voxcpm.checkpoint import WEIGHTS, load_config
    from models.voxcpm.config import lm_stack
    from models.voxcpm.loader import VoxCPMOptions

    opts = parse_options(VoxCPMOptions, options, "model")
    itemsize = DTYPES[opts.dtype].itemsize
    data = load_config(checkpoint)
    numel = sum(info.numel for info in read_headers([checkpoint / WEIGHTS]).values())
    vae = checkpoint / VAE_FILE
    lm = lm_stack(data)[0]
    layers = lm.num_layers + data["residual_lm_num_layers"]
    # As the loader reads it: unset, a turn may hold config.json's max_length positions.
    capacity = opts.kv_capacity or int(data.get("max_length", 8192))
    return MemoryProfile(
        family="voxcpm",
        dtype=opts.dtype,
        weights_bytes=numel * itemsize + (vae.stat().st_size if vae.is_file() else 0),
        kv_bytes_per_position=2 * layers * lm.num_kv_heads * lm.head_dim * itemsize,
        kv_positions_per_stream=min(KV_POSITIONS_PER_STREAM, capacity),
        kv_memory_fraction=opts.kv_memory_fraction,
        kv_capacity=capacity,
        stream_bytes=STREAM_BYTES,
        vocoder_frame_bytes=FRAME_BYTES,
        vocoder_batch_cap=VOCODER_BATCH_CAP,
        max_streams=MAX_STREAMS,
        reserve_bytes=RESERVE_BYTES,
        notes=(
            f"language models: {lm.num_layers} + {data['residual_lm_num_layers']} layers, "
            f"{lm.num_kv_heads} KV heads of {lm.head_dim}",
            f"AudioVAE decoder ~{FRAME_BYTES / MIB:.0f} MiB a decoded patch (estimated)",
        ),
    )
