"""What a Qwen3-TTS model costs on a GPU, per stream, from its checkpoint (headers and
configs only) and options: the input of ``models.sizing.plan``.

Exact: the weights (header shapes at the model's dtype), KV per position (talker
layers x KV heads x head dim x keys and values), the decoder's state per stream
(Code2Wav's state buffers, built on the meta device). Estimated, for the GPU run to
check: a vocoder frame's activations and the AR graphs' per-row buffers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from models.checkpoint import read_headers, read_json
from models.sizing import GIB, MIB, MemoryProfile, Sizes

CPU = Sizes(max_contexts=8, max_ar_batch=8, max_vocoder_batch=8)
"""On a CPU: a step of 8 contexts already takes most of a frame's 80 ms."""
KV_POSITIONS_PER_STREAM = 512
"""Positions budgeted per stream in the paged pool: a 30 s utterance (375 frames) with
its prompt; an 8 s one takes ~130. A longer stream (a voice clone's reference adds
12.5 positions a second) takes blocks shorter ones left."""
MAX_STREAMS = 512
"""1.7B on an H200 made 362x real time at 256 streams and 444x at 1,024
(bench/results/h200-graphs): past ~450 streams they cannot all run in real time."""
AR_ROW_BYTES = 1 * MIB
"""Per slot: sampling tables, the last hidden state, the frame and prefill graphs' rows
(~100 KiB at 1.7B; rounded up)."""
RESERVE_BYTES = 2 * GIB
VOCODER_GRAPH_FRAMES = (1, 2, 4, 8, 16)
"""``models.qwen3_tts.vocoder.GRAPH_FRAMES`` (not imported: that module needs torch)."""
VOCODER_GRAPH_MAX_FRAMES = 1024
VOCODER_BATCH_CAP = 256
LIVE_TENSORS = (4, 2)
"""A decoder block's peak: about four tensors of its last stage (input with its
history, Snake, convolution, residual) and two of the stage before."""


def memory_profile(checkpoint: Path, options: Mapping[str, Any]) -> MemoryProfile:
    """The profile of the checkpoint at ``checkpoint`` served with model ``options``."""
    import torch

    from models.base import parse_options
    from models.dtypes import DTYPES
    from models.qwen3_tts.checkpoint import weight_files, weight_prefixes
    from models.qwen3_tts.code2wav import Code2Wav
    from models.qwen3_tts.config import parse_config, parse_speech_tokenizer_config
    from models.qwen3_tts.loader import Qwen3Options

    opts = parse_options(Qwen3Options, options, "model")
    itemsize = DTYPES[opts.dtype].itemsize
    cfg = parse_config(read_json(checkpoint / "config.json"))
    st_dir = checkpoint / "speech_tokenizer"
    st_cfg = parse_speech_tokenizer_config(read_json(st_dir / "config.json"))
    prefixes, st_prefixes = weight_prefixes(cfg.model_type)
    numel = sum(
        info.numel
        for directory, keep in ((checkpoint, prefixes), (st_dir, st_prefixes))
        for key, info in read_headers(weight_files(directory)).items()
        if key.startswith(keep)
    )
    stack = cfg.talker.stack
    with torch.device("meta"):
        decoder = Code2Wav(st_cfg.decoder)
    state = sum(math.prod(shape) for shape, _ in decoder.state_specs().values()) * itemsize
    rows = 2 if opts.cuda_graphs else 1  # graphs keep twice the contexts' rows, fixed
    d = st_cfg.decoder
    ratio = math.prod(d.upsampling_ratios)
    stages = [
        (d.decoder_dim // 2 ** (i + 1), ratio * math.prod(d.upsample_rates[: i + 1]))
        for i in range(len(d.upsample_rates))
    ]
    (c_last, p_last), (c_prev, p_prev) = stages[-1], stages[-2] if len(stages) > 1 else (0, 0)
    frame = itemsize * (LIVE_TENSORS[0] * c_last * p_last + LIVE_TENSORS[1] * c_prev * p_prev)
    return MemoryProfile(
        family="qwen3_tts",
        dtype=opts.dtype,
        weights_bytes=numel * itemsize,
        kv_bytes_per_position=2 * stack.num_layers * stack.num_kv_heads * stack.head_dim * itemsize,
        kv_positions_per_stream=min(KV_POSITIONS_PER_STREAM, opts.kv_capacity),
        kv_memory_fraction=opts.kv_memory_fraction,
        kv_capacity=opts.kv_capacity,
        stream_bytes=rows * state + AR_ROW_BYTES,
        vocoder_frame_bytes=frame,
        vocoder_graph_frames=VOCODER_GRAPH_FRAMES if opts.cuda_graphs else (),
        vocoder_graph_max_frames=VOCODER_GRAPH_MAX_FRAMES,
        vocoder_batch_cap=VOCODER_BATCH_CAP,
        max_streams=MAX_STREAMS,
        reserve_bytes=RESERVE_BYTES,
        notes=(
            f"decoder state {state / MIB:.2f} MiB a stream x {rows} rows",
            f"vocoder activations ~{frame / MIB:.2f} MiB a frame (estimated)",
        ),
    )
