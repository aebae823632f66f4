"""Load an unmodified Fish Speech S2 Pro checkpoint directory as a servable model.

The directory as published (``fishaudio/s2-pro``): ``config.json``, the dual AR in
``model.safetensors`` (or shards with ``model.safetensors.index.json``),
``tokenizer.json`` and the codec in ``codec.pth``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch

from models.base import CLONE_VOICE, Capabilities, LoadedModel, VoiceInfo, parse_options
from models.blocks.dac_file import load_codec
from models.checkpoint import CheckpointError, checkpoint_root
from models.dtypes import DTYPES
from models.fields import with_defaults
from models.fish_speech.checkpoint import load_dual_ar
from models.fish_speech.config import load_config
from models.fish_speech.prompt import load_prompts
from models.fish_speech.runner import DEFAULT_VOICE, MAX_TURN_FRAMES, REQUEST_FIELDS, FishRunner
from models.fish_speech.sampling import FishSampling
from models.fish_speech.sizing import CPU
from models.fish_speech.slots import BLOCK, FishSlots
from models.fish_speech.vocoder import FishVocoder
from models.kit.kv_pool import kv_blocks

DEFAULT_SAMPLING = FishSampling()


@dataclass(frozen=True)
class FishOptions:
    checkpoint: str | None = None
    """Checkpoint directory (the ``checkpoint`` argument of ``load`` wins)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """The dual AR's dtype; the codec stays float32 (the reference runs it so)."""
    device: str = "cpu"
    max_contexts: int | Literal["auto"] = "auto"
    """KV slots: contexts generating at once. ``auto``: 4 on a CPU; on a GPU sized at
    start-up from the memory free after the weights."""
    kv_capacity: int = 8192
    """Positions one context may hold: the system message (a clone's reference adds
    ~21.5 a second), then each text unit's turn and its speech (~21.5 a second)."""
    kv_memory_fraction: float = 0.5
    """On a GPU, the share of the memory free after the weights the KV pool takes; the
    slots share it as they grow."""
    max_new_tokens: int = MAX_TURN_FRAMES
    """Frames one turn (text unit) may make, at most; a request's ``max_new_tokens``
    lowers it."""
    temperature: float = DEFAULT_SAMPLING.temperature
    top_p: float = DEFAULT_SAMPLING.top_p
    top_k: int = DEFAULT_SAMPLING.top_k
    cuda_graphs: bool = True
    """On CUDA, replay a frame step (slow step, sampling, the fast transformer) from
    graphs captured per batch size at start-up."""
    ref_audio_min_s: float = 1.0
    """Shortest reference audio a clone takes."""
    ref_audio_max_s: float = 60.0
    """Longest reference audio a clone takes (its frames sit in every turn's context)."""
    bench_ignore_eos: bool = False
    """Benchmarks only: never end a turn, so every turn runs to its cap (random
    weights end at random)."""


def load(raw_options: Mapping[str, Any], checkpoint: Path | None = None) -> LoadedModel:
    options = parse_options(FishOptions, raw_options, "model")
    if options.max_contexts == "auto":
        options = replace(options, max_contexts=CPU.max_contexts)
    root = checkpoint_root(checkpoint, options.checkpoint)
    if not 1 <= options.max_new_tokens <= MAX_TURN_FRAMES * 4:
        raise ValueError(
            f"model.max_new_tokens must be from 1 to {MAX_TURN_FRAMES * 4}, "
            f"got {options.max_new_tokens}"
        )
    cfg = load_config(root)
    if not 256 <= options.kv_capacity <= cfg.max_seq_len:
        raise ValueError(
            f"model.kv_capacity must be from 256 to the model's max_seq_len "
            f"({cfg.max_seq_len}), got {options.kv_capacity}"
        )
    device, dtype = torch.device(options.device), DTYPES[options.dtype]
    prompts = load_prompts(root, cfg)
    codec = load_codec(root, device, torch.float32)
    if codec.n_codebooks != cfg.num_codebooks:
        raise CheckpointError(
            f"codec.pth has {codec.n_codebooks} codebooks but config.json's "
            f"audio_decoder_config.num_codebooks is {cfg.num_codebooks}",
            root,
        )
    slow, fast = load_dual_ar(root, cfg, prompts.im_end, device, dtype)
    blocks = kv_blocks(
        options.max_contexts,
        options.kv_capacity,
        BLOCK,
        options.kv_memory_fraction,
        cfg.slow,
        dtype,
        device,
    )
    ar = FishSlots(
        slow,
        fast,
        prompts.im_end,
        options.max_contexts,
        options.kv_capacity,
        codec.cfg.codebook_size,
        blocks=blocks,
        ignore_eos=options.bench_ignore_eos,
        cuda_graphs=options.cuda_graphs,
    )
    sampling = FishSampling(options.temperature, options.top_p, options.top_k)
    capabilities = Capabilities(
        family="fish_speech",
        sample_rate=codec.sample_rate,
        samples_per_frame=codec.hop_length,
        voices=(
            VoiceInfo(DEFAULT_VOICE, "en", "the model's own voice (no reference)"),
            VoiceInfo(CLONE_VOICE, "en", "voice cloned from ref_audio and ref_text"),
        ),
        languages=("en", "zh", "ja", "ko", "fr", "de", "es", "ar"),
        max_context_chars=options.kv_capacity // 4,
        request_fields=with_defaults(
            REQUEST_FIELDS,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            max_new_tokens=options.max_new_tokens,
        ),
    )
    runner = FishRunner(
        ar,
        prompts,
        capabilities,
        options.kv_capacity,
        sampling,
        options.max_new_tokens,
        codec,
        (options.ref_audio_min_s, options.ref_audio_max_s),
    )
    return LoadedModel(runner=runner, vocoder=FishVocoder(codec, device, torch.float32))
